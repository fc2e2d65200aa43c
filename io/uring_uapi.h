// io_uring kernel ABI that Debian 12's liburing 2.3 headers predate. Values are the kernel's
// (include/uapi/linux/io_uring.h); each names the kernel that brought it. Every use sits behind
// the start-up probe (io/probe.cc), so an older kernel loses the feature, never the tier.
#pragma once

#include <liburing.h>

#include <cstdint>

namespace ringd::io::uapi {

// io_uring_buf_reg.flags (liburing 2.3 calls the field `pad`): the kernel consumes a provided
// buffer a receive at a time, advancing its address, instead of taking a whole buffer per
// receive. Linux 6.12.
constexpr uint16_t kPbufRingInc = 2;  // IOU_PBUF_RING_INC

// CQE flag with incremental consumption: the kernel keeps using this buffer (it has room left),
// so the application must not hand it back yet. Linux 6.12.
constexpr uint32_t kCqeBufMore = 1U << 4;  // IORING_CQE_F_BUF_MORE

// A multishot IORING_OP_RECV with a non-zero length caps each completion at that many bytes.
// Linux 6.10 (before, the kernel refused the length with EINVAL). No constant: it is sqe->len.

// IORING_REGISTER_NAPI / IORING_UNREGISTER_NAPI and their argument: busy-poll the NAPI
// contexts of the ring's sockets while waiting for completions. Linux 6.9.
constexpr unsigned kRegisterNapi = 27;
constexpr unsigned kUnregisterNapi = 28;
struct Napi {
  uint32_t busy_poll_to = 0;     // microseconds
  uint8_t prefer_busy_poll = 0;  // SO_PREFER_BUSY_POLL: interrupts stay off while polling
  uint8_t opcode = 0;            // 6.13: IO_URING_NAPI_REGISTER_OP (0), the 6.9 behaviour
  uint8_t pad[2] = {0, 0};
  uint32_t op_param = 0;  // 6.13: IO_URING_NAPI_TRACKING_DYNAMIC (0), the 6.9 behaviour
  uint32_t resv = 0;
};
static_assert(sizeof(Napi) == 16, "struct io_uring_napi is 16 bytes");

// io_uring_params.features: io_uring_getevents_arg's `pad` is min_wait_usec, a first timeout
// after which a wait for several completions returns with any it has. Linux 6.12.
constexpr uint32_t kFeatMinTimeout = 1U << 15;  // IORING_FEAT_MIN_TIMEOUT

// IORING_OP_FIXED_FD_INSTALL: a process fd for a registered file table slot (sqe->fd, with
// IOSQE_FIXED_FILE); the result is the new fd, O_CLOEXEC unless install_fd_flags says otherwise.
// Linux 6.8.
constexpr uint8_t kOpFixedFdInstall = 54;

}  // namespace ringd::io::uapi
