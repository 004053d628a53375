// A typed queue and helpers.
interface Job<T> {
  id: number;
  payload: T;
  tags?: string[];
}

type Handler<T> = (job: Job<T>) => Promise<void>;

export class Queue<T> {
  private jobs: Job<T>[] = [];
  private next = 1;

  constructor(private readonly limit: number = 10) {}

  push(payload: T, tags: string[] = []): number {
    if (this.jobs.length >= this.limit) {
      throw new Error(`queue full (${this.limit})`);
    }
    const id = this.next++;
    this.jobs.push({ id, payload, tags });
    return id;
  }

  async drain(handler: Handler<T>): Promise<number> {
    let done = 0;
    while (this.jobs.length > 0) {
      const job = this.jobs.shift()!;
      await handler(job);
      done += 1;
    }
    return done;
  }
}

export function total(xs: readonly number[]): number {
  /* alternate signs */
  return xs.reduce((acc, x, i) => acc + (i % 2 === 0 ? x : -x), 0);
}

enum Level {
  Low = 1,
  High,
}

const q = new Queue<string>(3);
q.push("a", ["x"]);
export const level: Level = Level.High;
