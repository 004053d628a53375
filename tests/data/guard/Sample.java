import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/** A bounded stack and a few helpers. */
public class Sample {
    private final List<Integer> items = new ArrayList<>();
    private final int limit;

    public Sample(int limit) {
        this.limit = limit;
    }

    public boolean push(int value) {
        if (items.size() >= limit) {
            return false; // full
        }
        items.add(value);
        return true;
    }

    public int pop() {
        if (items.isEmpty()) throw new IllegalStateException("empty");
        return items.remove(items.size() - 1);
    }

    static int sum(int[] xs) {
        int total = 0;
        for (int i = 0; i < xs.length; i++) {
            total += (i % 2 == 0) ? xs[i] : -xs[i];
        }
        return total;
    }

    static String describe(Map<String, Integer> m) {
        StringBuilder sb = new StringBuilder("{");
        m.forEach((k, v) -> sb.append(k).append('=').append(v).append(", "));
        return sb.append("}").toString();
    }

    public static void main(String[] args) {
        Sample s = new Sample(3);
        /* fill and drain */
        for (int i = 0; i < 5; i++) s.push(i * i);
        while (true) {
            try {
                System.out.println(s.pop());
            } catch (IllegalStateException e) {
                break;
            }
        }
    }
}
