// Runs a program under a seccomp allow-list, as systemd's SystemCallFilter= does: the system
// calls named in FILE (one per line) are allowed, every other one fails with EPERM
// (SystemCallErrorNumber=EPERM). tests/integration/units_test.py expands ringd.service's filter
// with systemd-analyze and runs ringd under it, so the unit's filter is checked without systemd.
//   syscall_allow_exec FILE PROGRAM [ARGS...]
#include <seccomp.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: syscall_allow_exec FILE PROGRAM [ARGS...]\n");
    return 2;
  }
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(EPERM));
  if (ctx == nullptr) {
    std::fprintf(stderr, "syscall_allow_exec: seccomp_init failed\n");
    return 1;
  }
  std::ifstream in(argv[1]);
  if (!in) {
    std::fprintf(stderr, "syscall_allow_exec: cannot read %s\n", argv[1]);
    return 1;
  }
  std::string name;
  int allowed = 0;
  while (std::getline(in, name)) {
    if (name.empty()) continue;
    const int nr = seccomp_syscall_resolve_name(name.c_str());
    if (nr == __NR_SCMP_ERROR) continue;  // not a system call of this architecture
    if (seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0) == 0) ++allowed;
  }
  // execve must stay allowed for the exec below; it is in @default, so the list has it.
  if (seccomp_load(ctx) != 0) {
    std::fprintf(stderr, "syscall_allow_exec: cannot load the filter (%d calls allowed)\n",
                 allowed);
    return 1;
  }
  execv(argv[2], argv + 2);
  std::fprintf(stderr, "syscall_allow_exec: cannot run %s: %s\n", argv[2], strerror(errno));
  return 127;
}
