#pragma once
// Tests of permission errors (a read-only directory) as root: root ignores the mode bits, so the
// code under test runs in a forked child that has become the unprivileged user "nobody" (uid and
// gid 65534) first. Used by SaveFailure.UnwritableDirectory (a save in the child) and by the
// dp-train tests (the child then execs dp-train, tests/tools/test_dp_train_util.h).
#include <grp.h>
#include <sys/types.h>
#include <unistd.h>

namespace dp::test {

inline constexpr uid_t kNobody = 65534;
// A forked child's exit status when it could not drop its privileges (the test then skips). Not a
// status dp-train or the children of the tests exit with.
inline constexpr int kCannotDropPrivileges = 125;

// Whether permission bits bind this process; if not (root), a permission test runs as nobody.
inline bool permissions_bind() { return ::geteuid() != 0; }

// In a forked child: drops every supplementary group, then the real, effective and saved group and
// user ids to nobody. True when the child is nobody afterwards and cannot become root again.
inline bool become_nobody() {
  if (::setgroups(0, nullptr) != 0) return false;
  if (::setresgid(kNobody, kNobody, kNobody) != 0) return false;
  if (::setresuid(kNobody, kNobody, kNobody) != 0) return false;
  return ::geteuid() == kNobody && ::getegid() == kNobody && ::setresuid(0, 0, 0) != 0;
}

}  // namespace dp::test
