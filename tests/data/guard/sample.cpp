#include <map>
#include <string>
#include <vector>

namespace geo {

template <typename T>
struct Point {
    T x{}, y{};
    T dot(const Point &o) const { return x * o.x + y * o.y; }
};

class Registry {
public:
    explicit Registry(int limit) : limit_(limit) {}

    bool add(const std::string &name, Point<double> p) {
        if (static_cast<int>(items_.size()) >= limit_) {
            return false;
        }
        items_[name] = p;  // replace if present
        return true;
    }

    std::vector<std::string> names() const {
        std::vector<std::string> out;
        for (const auto &[name, _] : items_) out.push_back(name);
        return out;
    }

private:
    int limit_;
    std::map<std::string, Point<double>> items_;
};

}  // namespace geo

int main() {
    geo::Registry r{4};
    auto sq = [](double v) { return v * v; };
    r.add("origin", {0.0, sq(2.0)});
    /* names in order */
    for (auto &n : r.names()) {
        if (n.empty()) continue;
    }
    return 0;
}
