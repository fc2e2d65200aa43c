#include "tests/sim/sim_h2.h"

#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <cstring>

#include "io/assert.h"

namespace ringd::sim {

struct SimH2Callbacks {
  static SimH2Client* Self(void* user) { return static_cast<SimH2Client*>(user); }

  static int OnHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                      size_t namelen, const uint8_t* value, size_t valuelen, uint8_t, void* user) {
    if (frame->hd.type != NGHTTP2_HEADERS) return 0;
    SimH2Client::Done& d = Self(user)->open_[frame->hd.stream_id];
    const std::string n(reinterpret_cast<const char*>(name), namelen);
    const std::string v(reinterpret_cast<const char*>(value), valuelen);
    if (n == ":status") {
      d.status = std::atoi(v.c_str());
    } else {
      d.headers[n] = v;
    }
    return 0;
  }

  static int OnData(nghttp2_session*, uint8_t, int32_t id, const uint8_t* data, size_t len,
                    void* user) {
    Self(user)->open_[id].body.append(reinterpret_cast<const char*>(data), len);
    return 0;
  }

  static int OnFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    SimH2Client* self = Self(user);
    if ((frame->hd.type == NGHTTP2_DATA || frame->hd.type == NGHTTP2_HEADERS) &&
        (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0) {
      self->open_[frame->hd.stream_id].ended = true;
    }
    if (frame->hd.type == NGHTTP2_GOAWAY) {
      self->goaway_last_ = frame->goaway.last_stream_id;
      self->goaway_error_ = frame->goaway.error_code;
    }
    return 0;
  }

  static int OnStreamClose(nghttp2_session*, int32_t id, uint32_t error, void* user) {
    SimH2Client* self = Self(user);
    SimH2Client::Done d = std::move(self->open_[id]);
    self->open_.erase(id);
    d.stream_id = id;
    if (!d.ended) d.reset = error == 0 ? static_cast<uint32_t>(NGHTTP2_INTERNAL_ERROR) : error;
    self->done_.push_back(std::move(d));
    return 0;
  }

  static ssize_t ReadBody(nghttp2_session*, int32_t id, uint8_t* buf, size_t length,
                          uint32_t* flags, nghttp2_data_source*, void* user) {
    uint64_t& left = Self(user)->body_left_[id];
    const size_t n = static_cast<size_t>(std::min<uint64_t>(left, length));
    std::memset(buf, 'z', n);
    left -= n;
    if (left == 0) *flags |= NGHTTP2_DATA_FLAG_EOF;
    return static_cast<ssize_t>(n);
  }
};

SimH2Client::SimH2Client(uint32_t window) {
  nghttp2_session_callbacks* cb;
  RINGD_ASSERT(nghttp2_session_callbacks_new(&cb) == 0);
  nghttp2_session_callbacks_set_on_header_callback(cb, &SimH2Callbacks::OnHeader);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, &SimH2Callbacks::OnData);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, &SimH2Callbacks::OnFrameRecv);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, &SimH2Callbacks::OnStreamClose);
  RINGD_ASSERT(nghttp2_session_client_new(&session_, cb, this) == 0);
  nghttp2_session_callbacks_del(cb);
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, window},
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
  };
  RINGD_ASSERT(nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, 2) == 0);
}

SimH2Client::~SimH2Client() { nghttp2_session_del(session_); }

int32_t SimH2Client::Submit(const std::vector<std::pair<std::string, std::string>>& fields,
                            uint64_t body) {
  std::vector<nghttp2_nv> nv;
  for (const auto& [n, v] : fields) {
    nv.push_back(nghttp2_nv{reinterpret_cast<uint8_t*>(const_cast<char*>(n.data())),
                            reinterpret_cast<uint8_t*>(const_cast<char*>(v.data())), n.size(),
                            v.size(), NGHTTP2_NV_FLAG_NONE});
  }
  nghttp2_data_provider provider;
  provider.source.ptr = nullptr;
  provider.read_callback = &SimH2Callbacks::ReadBody;
  const int32_t id = nghttp2_submit_request(session_, nullptr, nv.data(), nv.size(),
                                            body > 0 ? &provider : nullptr, nullptr);
  RINGD_ASSERT(id > 0);
  if (body > 0) body_left_[id] = body;
  return id;
}

void SimH2Client::Cancel(int32_t id) {
  nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
}

std::string SimH2Client::Output() {
  std::string out;
  for (;;) {
    const uint8_t* data = nullptr;
    const ssize_t n = nghttp2_session_mem_send(session_, &data);
    RINGD_ASSERT(n >= 0);
    if (n == 0) return out;
    out.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
  }
}

bool SimH2Client::Feed(std::string_view bytes, std::string* why) {
  const ssize_t n = nghttp2_session_mem_recv(
      session_, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  if (n < 0) {
    *why = std::string("the server broke HTTP/2: ") + nghttp2_strerror(static_cast<int>(n));
    return false;
  }
  return true;
}

std::vector<SimH2Client::Done> SimH2Client::TakeDone() { return std::exchange(done_, {}); }

}  // namespace ringd::sim
