// pmo_cxx.cpp - include/pmo.h from C++ (g++ -std=c++11 -Wall -Wextra -Werror), linked against
// the shared libpmo.so. Creates, writes, psyncs, re-attaches and destroys one PMO.
// Driven by crates/pmo-capi/tests/c_programs.rs; prints "pmo_cxx: ok" and exits 0 on success.
#include "pmo_heap.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

int failures = 0;

void check(bool ok, const char *what) {
    if (!ok) {
        std::fprintf(stderr, "pmo_cxx: check failed: %s (errno %d, %s)\n", what, errno,
                     pmo_last_error_message());
        ++failures;
    }
}

// A C++ owner of an attachment: detaches on scope exit.
class Attached {
  public:
    Attached(const char *name, char perm, const char *key) : addr_(attach(name, perm, key)) {}
    ~Attached() {
        if (addr_ != nullptr)
            pmo_detach(addr_);
    }
    Attached(const Attached &) = delete;
    Attached &operator=(const Attached &) = delete;
    char *bytes() const { return static_cast<char *>(addr_); }

  private:
    void *addr_;
};

} // namespace

int main() {
    const char *key = "c++ key";
    check(pmo_create("cxx", 4096, key) == key, "pmo_create returns the key");
    void *first = nullptr;
    {
        Attached a("cxx", 'w', key);
        check(a.bytes() != nullptr, "attach w");
        if (a.bytes() != nullptr) {
            first = a.bytes();
            std::strcpy(a.bytes(), "hello from C++");
            check(psync(a.bytes()) == 0, "psync");
            char *name = pmo_get_name(a.bytes() + 100);
            check(name != nullptr && std::string(name) == "cxx", "pmo_get_name");
            std::free(name);
        }
    }
    {
        Attached b("cxx", 'r', key);
        check(b.bytes() == first, "same address on re-attach");
        check(b.bytes() != nullptr && std::string(b.bytes()) == "hello from C++", "contents");
        pmo_psync_stats st = pmo_psync_stats();
        check(pmo_psync_ex(b.bytes(), &st) == PMO_E_READ_ONLY, "psync_ex read-only");
        check(std::string(pmo_strerror(pmo_last_error())) == pmo_strerror(PMO_E_READ_ONLY),
              "pmo_strerror");
    }
    // The persistent heap from C++: the default heap, created on first use.
    {
        struct point {
            double x, y;
        };
        point *p = static_cast<point *>(pmo_p_malloc(sizeof(point)));
        check(p != nullptr && pmo_p_sizeof(p) >= sizeof(point), "pmo_p_malloc");
        if (p != nullptr) {
            p->x = 1.5;
            p->y = -2.0;
            check(pmo_p_set_root(p) == 0 && pmo_p_persist() == 0, "root + pmo_p_persist");
            check(static_cast<point *>(pmo_p_get_root()) == p, "pmo_p_get_root");
            check(pmo_p_set_root(nullptr) == 0 && pmo_p_free(p) == 0, "pmo_p_free");
            errno = 0;
            check(pmo_p_free(p) == -1 && errno == EINVAL, "double free EINVAL");
        }
        check(pmo_heap_close(pmo_heap_default()) == 0, "pmo_heap_close");
    }
    errno = 0;
    check(attach("cxx", 'r', "not the key") == nullptr && errno == EACCES, "wrong key EACCES");
    check(pmo_destroy("cxx", key) == 0, "pmo_destroy");
    check(pmo_exists("cxx") == 0, "gone");
    if (failures != 0)
        return 1;
    std::printf("pmo_cxx: ok\n");
    return 0;
}
