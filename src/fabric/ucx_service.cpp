// UcxServer and connect_ucx_servers: memory nodes as services (protocol in rdmahash/ucx_service.h).
//
// The server is one thread and one poll() loop over: the listening socket, every client's TCP
// connection, the UCX worker's event fd (armed before sleeping, as UcxFabric::serve() does), an
// eventfd for stop() and, with handle_signals, a signalfd for SIGTERM / SIGINT. Sockets are
// non-blocking; a connection's hello (then its proof of the token) is collected into a fixed
// buffer until it is whole or the handshake's deadline passes, so no client can stall the loop.
// The crypto is libsodium's (HMAC-SHA256, crypto_verify_32, secretbox, randombytes).
#include "rdmahash/ucx_service.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sodium.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "fabric/ucx_internal.h"

namespace rdmahash {
namespace {

constexpr char kMagic[8] = {'R', 'D', 'M', 'A', 'H', 'A', 'S', 'H'};
constexpr uint32_t kVersion = 2;
constexpr size_t kHeaderBytes = 16;                     // magic, version, flags
constexpr size_t kNonceBytes = 32;
constexpr size_t kHelloBytes = kHeaderBytes + kNonceBytes;  // + the client's nonce
constexpr size_t kProofBytes = crypto_auth_hmacsha256_BYTES;
constexpr uint32_t kStatusWelcome = 0, kStatusRefused = 1, kStatusChallenge = 2;
constexpr uint32_t kChallengeTokenRequired = 1;
static_assert(crypto_auth_hmacsha256_BYTES == 32 && crypto_secretbox_KEYBYTES == 32);
constexpr uint32_t kMaxReplyBody = 1u << 20;
constexpr char kBye[4] = {'B', 'Y', 'E', '!'};
constexpr auto kHandshakeDeadline = std::chrono::seconds(5);

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

void sodium_ready() {
  if (::sodium_init() < 0) throw FabricError("ucx service: libsodium failed to initialise");
}

using Nonce = std::array<unsigned char, kNonceBytes>;
using Mac = std::array<unsigned char, kProofBytes>;

// HMAC-SHA256 keyed by the token over a label and the transcript so far (both nonces, and for the
// session key the client's proof too): a proof is good for one connection only.
Mac token_mac(const std::string& token, std::string_view label, const Nonce& client, const Nonce& server,
              const Mac* client_proof = nullptr) {
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, reinterpret_cast<const unsigned char*>(token.data()), token.size());
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(label.data()), label.size());
  crypto_auth_hmacsha256_update(&st, client.data(), client.size());
  crypto_auth_hmacsha256_update(&st, server.data(), server.size());
  if (client_proof) crypto_auth_hmacsha256_update(&st, client_proof->data(), client_proof->size());
  Mac out;
  crypto_auth_hmacsha256_final(&st, out.data());
  sodium_memzero(&st, sizeof st);
  return out;
}
constexpr std::string_view kClientLabel = "rdmahash handshake v2: client proof";
constexpr std::string_view kSessionLabel = "rdmahash handshake v2: welcome key";
// The welcome (worker address, rkey) is sealed with a key only this connection's two ends can
// derive: secretbox (XSalsa20-Poly1305) authenticates the server to the client and hides the rkey
// from a passive observer of the handshake. The key is fresh per connection, so a zero nonce is safe.
constexpr unsigned char kZeroNonce[crypto_secretbox_NONCEBYTES] = {};

struct Endpoint {
  std::string host;
  uint16_t port = 0;
  sockaddr_in addr{};
};

// "host:port", IPv4 (a dotted quad or a name that resolves to one). Throws std::invalid_argument.
Endpoint parse_endpoint(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    throw std::invalid_argument("address '" + text + "' is not host:port");
  Endpoint e;
  e.host = text.substr(0, colon);
  const std::string port = text.substr(colon + 1);
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos || std::stoul(port) > 65535)
    throw std::invalid_argument("address '" + text + "': port must be 0..65535");
  e.port = static_cast<uint16_t>(std::stoul(port));
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(e.host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr)
    throw std::invalid_argument("address '" + text + "': cannot resolve '" + e.host + "' to an IPv4 address (" +
                                ::gai_strerror(rc) + ")");
  std::memcpy(&e.addr, res->ai_addr, sizeof e.addr);
  ::freeaddrinfo(res);
  e.addr.sin_port = htons(e.port);
  return e;
}

// This host's identity for "same host" (may UCX reach the peer over shared memory?): the kernel's
// boot id, its host name and its network namespace. One kernel can hold several hosts — the network
// and UTS namespaces of scripts/hosts.sh — between which UCX uses TCP, not shared memory; so the
// boot id alone (what shared memory needs in common) is not enough. Empty when there is no boot id.
std::string host_id() {
  char buf[64] = {};
  if (FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    if (!std::fgets(buf, sizeof buf, f)) buf[0] = 0;
    std::fclose(f);
  }
  std::string id(buf);
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  if (id.empty()) return id;
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) == 0) id += "/" + std::string(name);
  char ns[64] = {};
  if (const ssize_t n = ::readlink("/proc/self/ns/net", ns, sizeof ns - 1); n > 0) id += "/" + std::string(ns, static_cast<size_t>(n));
  return id;
}

// May UCX carry this process's traffic over shared memory? UCX_TLS unset, or naming a shared-memory
// transport ("^..." lists exclusions).
bool shared_memory_allowed() {
  const char* tls = std::getenv("UCX_TLS");
  if (tls == nullptr || *tls == 0) return true;
  std::string t(tls);
  const bool exclude = t[0] == '^';
  bool names_shm = false;
  size_t pos = exclude ? 1 : 0;
  while (pos <= t.size()) {
    const size_t end = std::min(t.find(',', pos), t.size());
    const std::string name = t.substr(pos, end - pos);
    if (name == "sm" || name == "shm" || name == "posix" || name == "sysv" || name == "all") names_shm = true;
    pos = end + 1;
  }
  return exclude ? !names_shm : names_shm;
}

bool is_loopback(const sockaddr_in& a) { return (ntohl(a.sin_addr.s_addr) >> 24) == 127; }

std::string text_of(const sockaddr_in& a) {
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &a.sin_addr, buf, sizeof buf);
  return std::string(buf) + ":" + std::to_string(ntohs(a.sin_port));
}

// UCX's network devices for an address: "lo" for the loopback, the interface holding the address
// otherwise, every device for 0.0.0.0.
std::string net_devices_for(const sockaddr_in& a) {
  if (is_loopback(a)) return "lo";
  if (a.sin_addr.s_addr == htonl(INADDR_ANY)) return "";
  ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) != 0) throw FabricError(errno_text("ucx service: getifaddrs"));
  std::string name;
  for (ifaddrs* i = ifs; i; i = i->ifa_next)
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
        reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == a.sin_addr.s_addr) {
      name = i->ifa_name;
      break;
    }
  ::freeifaddrs(ifs);
  if (name.empty()) throw std::invalid_argument("no network interface of this machine has the address " + text_of(a));
  return name;
}

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  ~Fd() { reset(); }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

void put_u32(std::vector<std::byte>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
}
void put_blob(std::vector<std::byte>& out, std::span<const std::byte> b) {
  put_u32(out, static_cast<uint32_t>(b.size()));
  out.insert(out.end(), b.begin(), b.end());
}

// Reads a little-endian body; every read is bounds-checked (a short body throws).
class Reader {
 public:
  explicit Reader(std::span<const std::byte> b) : b_(b) {}
  uint32_t u32() {
    need(4);
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(b_[pos_ + i]) << (8 * i);
    pos_ += 4;
    return v;
  }
  std::vector<std::byte> blob() {
    const uint32_t n = u32();
    need(n);
    std::vector<std::byte> out(b_.begin() + static_cast<std::ptrdiff_t>(pos_), b_.begin() + static_cast<std::ptrdiff_t>(pos_ + n));
    pos_ += n;
    return out;
  }

 private:
  void need(size_t n) {
    if (b_.size() - pos_ < n) throw FabricError("a truncated reply");
  }
  std::span<const std::byte> b_;
  size_t pos_ = 0;
};

// Blocking send of all of `data` (MSG_NOSIGNAL: a closed peer is an error, not SIGPIPE). The
// socket may be non-blocking: waits for it to drain, at most `deadline`.
bool send_all(int fd, std::span<const std::byte> data, std::chrono::steady_clock::time_point deadline) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, static_cast<int>(left.count()));
      continue;
    }
    return false;
  }
  return true;
}

// Blocking receive of exactly `out.size()` bytes before `deadline`; false on EOF, error or timeout.
bool recv_all(int fd, std::span<std::byte> out, std::chrono::steady_clock::time_point deadline) {
  size_t done = 0;
  while (done < out.size()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(left.count()));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) return false;
    const ssize_t n = ::recv(fd, out.data() + done, out.size() - done, 0);
    if (n == 0) return false;
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Server

class Server final : public UcxServer {
 public:
  explicit Server(const UcxServerConfig& c) : config_(c) {
    if (c.nodes == 0 || c.node >= c.nodes)
      throw std::invalid_argument("memory node " + std::to_string(c.node) + " of " + std::to_string(c.nodes) + " does not exist");
    const Endpoint ep = parse_endpoint(c.listen);
    UcxFabricConfig fc;
    fc.memory_nodes = c.nodes;
    fc.region_bytes = c.region_bytes;
    fc.region_address = c.region_address;
    fc.net_devices = net_devices_for(ep.addr);
    fc.serve_mode = c.serve_mode;
    fc.serve_spin = c.spin;
    // Whoever completes the handshake gets the rkey of the whole region: beyond this host's
    // loopback, only clients that hold the token.
    if (!is_loopback(ep.addr) && c.token.empty())
      throw std::invalid_argument(text_of(ep.addr) + " is not a loopback address: a memory node reachable from other "
                                  "hosts needs a shared secret (give --token-file FILE, and the clients the same file)");
    sodium_ready();

    listen_ = Fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (listen_.get() < 0) throw FabricError(errno_text("ucx service: socket"));
    const int one = 1;
    ::setsockopt(listen_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(listen_.get(), reinterpret_cast<const sockaddr*>(&ep.addr), sizeof ep.addr) != 0) {
      // A port in use, an address of another host or a privileged port: the --listen given is the
      // bad input (the caller reports std::invalid_argument as a usage error, status 2).
      if (errno == EADDRINUSE || errno == EADDRNOTAVAIL || errno == EACCES)
        throw std::invalid_argument(errno_text("cannot listen on " + c.listen));
      throw FabricError(errno_text("ucx service: cannot listen on " + c.listen));
    }
    if (::listen(listen_.get(), 128) != 0) throw FabricError(errno_text("ucx service: listen on " + c.listen));
    sockaddr_in bound{};
    socklen_t len = sizeof bound;
    ::getsockname(listen_.get(), reinterpret_cast<sockaddr*>(&bound), &len);
    address_ = ep.host + ":" + std::to_string(ntohs(bound.sin_port));

    stop_ = Fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (stop_.get() < 0) throw FabricError(errno_text("ucx service: eventfd"));
    if (c.handle_signals) {
      // Blocked before UCX starts its threads (they inherit the mask), so SIGTERM / SIGINT reach
      // nobody but the signalfd.
      sigset_t mask;
      sigemptyset(&mask);
      sigaddset(&mask, SIGTERM);
      sigaddset(&mask, SIGINT);
      pthread_sigmask(SIG_BLOCK, &mask, &old_mask_);
      masked_ = true;
      sigfd_ = Fd(::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));
      if (sigfd_.get() < 0) throw FabricError(errno_text("ucx service: signalfd"));
    }
    node_ = detail::make_ucx_service_node(fc, c.node, c.nodes);
  }
  ~Server() override {
    conns_.clear();
    node_.reset();
    if (masked_) pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
  }

  Fabric& fabric() override { return node_->fabric(); }
  std::string address() const override { return address_; }
  void set_table_spec(std::string spec) override { config_.table_spec = std::move(spec); }
  void set_loss_handler(std::unique_ptr<ClientLossHandler> h) override { loss_ = std::move(h); }
  Stats stats() const override {
    Stats s = stats_;
    s.spin_pauses = node_->spin_pauses();
    s.live = 0;
    for (const auto& c : conns_) s.live += c.connected ? 1 : 0;
    return s;
  }
  void stop() override {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(stop_.get(), &one, sizeof one);
  }
  int run(std::FILE* log) override;

 private:
  struct Conn {
    Fd fd;
    std::string peer;
    enum class Stage { kHello, kProof, kConnected } stage = Stage::kHello;
    bool connected = false;     // welcome sent
    uint32_t id = 0;
    std::byte in[kHelloBytes]{};  // the hello, then the proof (kProofBytes ≤ kHelloBytes)
    size_t got = 0;             // bytes of the current message (the goodbye, once connected)
    Nonce client_nonce{}, server_nonce{};
    std::chrono::steady_clock::time_point deadline;  // of the whole handshake
  };

  void accept_all(std::FILE* log);
  // Reads what `c` sent; false when the connection is over (closed, bad input).
  bool on_readable(Conn& c, std::FILE* log);
  bool send_reply(Conn& c, uint32_t status, std::span<const std::byte> body, std::FILE* log);
  bool refuse(Conn& c, const std::string& why, std::FILE* log);
  bool on_hello(Conn& c, std::FILE* log);
  bool on_proof(Conn& c, std::FILE* log);
  void drop(Conn& c, std::FILE* log, const std::string& why) {
    ++stats_.dropped;
    if (log) std::fprintf(log, "rdmahash serve: dropped a connection from %s: %s\n", c.peer.c_str(), why.c_str());
  }
  std::vector<std::byte> welcome_body(uint32_t id, const std::vector<std::byte>& worker_address);

  UcxServerConfig config_;
  std::string address_;
  Fd listen_, stop_, sigfd_;
  sigset_t old_mask_{};
  bool masked_ = false;
  std::unique_ptr<detail::UcxServiceNode> node_;
  std::vector<Conn> conns_;
  uint32_t next_id_ = 0;
  Stats stats_;
  std::vector<std::byte> region_export_;  // made once, on first use
  std::unique_ptr<ClientLossHandler> loss_;
  // accept() out of descriptors: backoff and bounded logging (accept_all()).
  static constexpr auto kAcceptBackoff = std::chrono::milliseconds(100);
  static constexpr auto kAcceptLogEvery = std::chrono::seconds(10);
  static constexpr uint64_t kAcceptLogFirst = 3;
  std::chrono::steady_clock::time_point accept_paused_until_{}, accept_next_log_{};
  uint64_t accept_logged_ = 0;
  bool repair_pending_ = false;
  std::chrono::steady_clock::time_point repair_at_, lost_at_;
  double mark_ms_ = 0;
  void client_lost(uint32_t id) {
    ++stats_.lost;
    if (!loss_) return;
    const auto t0 = std::chrono::steady_clock::now();
    if (!repair_pending_) lost_at_ = t0;
    loss_->mark(id);
    mark_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    repair_pending_ = true;
    repair_at_ = std::chrono::steady_clock::now() + config_.recovery_grace;
  }
};

std::vector<std::byte> Server::welcome_body(uint32_t id, const std::vector<std::byte>& worker_address) {
  if (region_export_.empty()) region_export_ = node_->region_export();
  std::vector<std::byte> body;
  put_u32(body, id);
  put_u32(body, config_.node);
  put_u32(body, config_.nodes);
  put_blob(body, worker_address);
  put_blob(body, region_export_);
  put_blob(body, std::as_bytes(std::span(config_.table_spec)));
  const std::string host = host_id();
  put_blob(body, std::as_bytes(std::span(host)));
  return body;
}

void Server::accept_all(std::FILE* log) {
  for (;;) {
    sockaddr_in peer{};
    socklen_t len = sizeof peer;
    const int fd = ::accept4(listen_.get(), reinterpret_cast<sockaddr*>(&peer), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      // Out of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM): the connection waits in
      // the backlog, and the listening socket stays readable, so looking again at once would spin
      // (one failed accept and one log line per look). Leave it alone for kAcceptBackoff and say
      // so a bounded number of times; the clients already connected go on being served.
      const auto now = std::chrono::steady_clock::now();
      accept_paused_until_ = now + kAcceptBackoff;
      ++stats_.accept_failures;
      if (log && (accept_logged_ < kAcceptLogFirst || now >= accept_next_log_)) {
        ++accept_logged_;
        accept_next_log_ = now + kAcceptLogEvery;
        std::fprintf(log, "rdmahash serve: accept: %s (%llu time(s) so far; not accepting for %lld ms, then again)\n",
                     std::strerror(errno), static_cast<unsigned long long>(stats_.accept_failures),
                     static_cast<long long>(kAcceptBackoff.count()));
      }
      return;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    Conn c;
    c.fd = Fd(fd);
    c.peer = text_of(peer);
    c.deadline = std::chrono::steady_clock::now() + kHandshakeDeadline;
    conns_.push_back(std::move(c));
  }
}

bool Server::send_reply(Conn& c, uint32_t status, std::span<const std::byte> body, std::FILE* log) {
  std::vector<std::byte> reply(reinterpret_cast<const std::byte*>(kMagic), reinterpret_cast<const std::byte*>(kMagic) + 8);
  put_u32(reply, status);
  put_u32(reply, static_cast<uint32_t>(body.size()));
  reply.insert(reply.end(), body.begin(), body.end());
  if (!send_all(c.fd.get(), reply, std::chrono::steady_clock::now() + std::chrono::seconds(1))) {
    drop(c, log, "could not send the reply");
    return false;
  }
  return true;
}

bool Server::refuse(Conn& c, const std::string& why, std::FILE* log) {
  if (send_reply(c, kStatusRefused, std::as_bytes(std::span(why)), log)) drop(c, log, "refused: " + why);
  return false;
}

// The hello is whole: check it, then challenge the client with a fresh nonce.
bool Server::on_hello(Conn& c, std::FILE* log) {
  std::memcpy(c.client_nonce.data(), c.in + kHeaderBytes, kNonceBytes);
  ::randombytes_buf(c.server_nonce.data(), c.server_nonce.size());
  std::vector<std::byte> body(reinterpret_cast<const std::byte*>(c.server_nonce.data()),
                              reinterpret_cast<const std::byte*>(c.server_nonce.data()) + kNonceBytes);
  put_u32(body, config_.token.empty() ? 0 : kChallengeTokenRequired);
  if (!send_reply(c, kStatusChallenge, body, log)) return false;
  c.stage = Conn::Stage::kProof;
  c.got = 0;
  return true;
}

// The proof is whole: verify it (constant time) before anything about the region leaves.
bool Server::on_proof(Conn& c, std::FILE* log) {
  Mac proof;
  std::memcpy(proof.data(), c.in, kProofBytes);
  if (!config_.token.empty()) {
    const Mac want = token_mac(config_.token, kClientLabel, c.client_nonce, c.server_nonce);
    if (::crypto_verify_32(proof.data(), want.data()) != 0) return refuse(c, "bad token", log);
  }
  std::vector<std::byte> body;
  try {
    body = welcome_body(next_id_, node_->add_client(next_id_));  // the client's own worker
  } catch (const std::exception& e) {
    node_->remove_client(next_id_);
    return refuse(c, e.what(), log);
  }
  if (!config_.token.empty()) {
    Mac key = token_mac(config_.token, kSessionLabel, c.client_nonce, c.server_nonce, &proof);
    std::vector<std::byte> sealed(body.size() + crypto_secretbox_MACBYTES);
    ::crypto_secretbox_easy(reinterpret_cast<unsigned char*>(sealed.data()), reinterpret_cast<const unsigned char*>(body.data()),
                            body.size(), kZeroNonce, key.data());
    sodium_memzero(key.data(), key.size());
    body = std::move(sealed);
  }
  if (!send_reply(c, kStatusWelcome, body, log)) {
    node_->remove_client(next_id_++);
    return false;
  }
  c.stage = Conn::Stage::kConnected;
  c.connected = true;
  c.id = next_id_++;
  c.got = 0;
  ++stats_.connected;
  if (log) std::fprintf(log, "rdmahash serve: client %u connected from %s\n", c.id, c.peer.c_str());
  return true;
}

bool Server::on_readable(Conn& c, std::FILE* log) {
  for (;;) {
    std::byte buf[64];
    const size_t want = c.stage == Conn::Stage::kConnected ? sizeof kBye - c.got
                        : c.stage == Conn::Stage::kProof   ? kProofBytes - c.got
                        : c.got < kHeaderBytes             ? kHeaderBytes - c.got  // checked before the nonce
                                                           : kHelloBytes - c.got;
    const ssize_t n = ::recv(c.fd.get(), buf, std::min(want, sizeof buf), 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
    }
    if (n <= 0) {  // closed (or reset)
      if (!c.connected) {
        drop(c, log, c.stage == Conn::Stage::kProof ? "closed before its proof of the token"
                     : c.got                         ? "closed during the hello"
                                                     : "closed before the hello");
      } else {
        if (log) std::fprintf(log, "rdmahash serve: client %u lost (connection closed without goodbye)\n", c.id);
        client_lost(c.id);
      }
      return false;
    }
    if (!c.connected) {
      std::memcpy(c.in + c.got, buf, static_cast<size_t>(n));
      c.got += static_cast<size_t>(n);
      if (c.stage == Conn::Stage::kHello && c.got == kHeaderBytes) {
        if (std::memcmp(c.in, kMagic, 8) != 0) {
          drop(c, log, "not an rdmahash hello");
          return false;
        }
        uint32_t version = 0, flags = 0;
        std::memcpy(&version, c.in + 8, 4);
        std::memcpy(&flags, c.in + 12, 4);
        if (version != kVersion || flags != 0)
          return refuse(c, "protocol version " + std::to_string(version) + " flags " + std::to_string(flags) +
                               " (this server speaks version 2, flags 0)", log);
      }
      if (c.stage == Conn::Stage::kHello && c.got == kHelloBytes && !on_hello(c, log)) return false;
      if (c.stage == Conn::Stage::kProof && c.got == kProofBytes && !on_proof(c, log)) return false;
      continue;
    }
    if (std::memcmp(buf, kBye + c.got, static_cast<size_t>(n)) != 0) {
      if (log) std::fprintf(log, "rdmahash serve: client %u sent bytes that are not a goodbye: disconnected\n", c.id);
      client_lost(c.id);
      return false;
    }
    c.got += static_cast<size_t>(n);
    if (c.got == sizeof kBye) {
      ++stats_.finished;
      if (log) std::fprintf(log, "rdmahash serve: client %u finished\n", c.id);
      return false;
    }
  }
}

int Server::run(std::FILE* log) {
  const int efd = node_->event_fd();
  int signal = 0;
  bool stopping = false;
  std::vector<pollfd> fds;
  if (log)
    std::fprintf(log, "rdmahash serve: serve mode %s%s (spin %lld us), UCX transports %s\n",
                 serve_mode_name(node_->serve_mode()), config_.serve_mode == ServeMode::kAuto ? " (auto)" : "",
                 static_cast<long long>(config_.spin.count()), node_->transports().c_str());
  auto last_look = std::chrono::steady_clock::now();
  while (!stopping) {
    // Not armed (poll mode, hybrid while busy, or events arrived while arming): look at the other
    // fds without sleeping, but only about every millisecond (each look is a poll() system call).
    const bool armed = node_->serve_step();
    if (!armed && std::chrono::steady_clock::now() - last_look < std::chrono::milliseconds(1)) continue;
    last_look = std::chrono::steady_clock::now();
    fds.clear();
    const bool accept_paused = std::chrono::steady_clock::now() < accept_paused_until_;
    fds.push_back({accept_paused ? -1 : listen_.get(), POLLIN, 0});  // -1: ignored by poll()
    fds.push_back({efd, POLLIN, 0});
    fds.push_back({stop_.get(), POLLIN, 0});
    fds.push_back({sigfd_.get(), POLLIN, 0});  // -1 (ignored by poll) without handle_signals
    auto now = std::chrono::steady_clock::now();
    int timeout = -1;
    for (const auto& c : conns_) {
      fds.push_back({c.fd.get(), POLLIN, 0});
      if (!c.connected) {
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(c.deadline - now).count();
        const int t = static_cast<int>(std::max<int64_t>(0, ms) + 1);
        timeout = timeout < 0 ? t : std::min(timeout, t);
      }
    }
    if (accept_paused) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(accept_paused_until_ - now).count();
      const int t = static_cast<int>(std::max<int64_t>(0, ms) + 1);
      timeout = timeout < 0 ? t : std::min(timeout, t);
    }
    if (repair_pending_) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(repair_at_ - now).count();
      const int t = static_cast<int>(std::max<int64_t>(0, ms) + 1);
      timeout = timeout < 0 ? t : std::min(timeout, t);
    }
    // A bounded sleep even with nothing due: a worker armed while UCX's TCP transport still held
    // unread bytes signals nothing more (seen across hosts, ucx_fabric.cpp serve()); progressing
    // again every 100 ms turns such a missed wakeup into a delay, never a hang.
    if (timeout < 0 || timeout > 100) timeout = 100;
    if (!armed) timeout = 0;
    else ++stats_.sleeps;  // counted as a blocking wait even when something is already ready
    const int rc = ::poll(fds.data(), fds.size(), timeout);
    if (rc < 0 && errno != EINTR) throw FabricError(errno_text("ucx service: poll"));
    if (rc < 0) continue;
    if (fds[2].revents) stopping = true;
    if (fds[3].revents) {
      signalfd_siginfo si{};
      if (::read(sigfd_.get(), &si, sizeof si) == static_cast<ssize_t>(sizeof si)) signal = static_cast<int>(si.ssi_signo);
      stopping = true;
    }
    // Clients (their pollfds follow the fixed four, in order) before accepting new ones.
    now = std::chrono::steady_clock::now();
    std::vector<Conn> kept;
    kept.reserve(conns_.size());
    for (size_t i = 0; i < conns_.size(); ++i) {
      Conn& c = conns_[i];
      bool keep = true;
      if (fds[4 + i].revents) keep = on_readable(c, log);
      if (keep && !c.connected && now >= c.deadline) {
        drop(c, log, c.stage == Conn::Stage::kProof ? "no proof of the token within 5 s" : "no complete hello within 5 s");
        keep = false;
      }
      if (keep) kept.push_back(std::move(c));
      else if (c.connected) node_->remove_client(c.id);  // finished or lost: its worker goes
    }
    conns_ = std::move(kept);
    if (repair_pending_ && std::chrono::steady_clock::now() >= repair_at_) {
      repair_pending_ = false;
      ++stats_.repairs;
      const auto t0 = std::chrono::steady_clock::now();
      const std::string line = loss_->repair();
      const auto t1 = std::chrono::steady_clock::now();
      if (log && !line.empty())
        std::fprintf(log, "rdmahash serve: %s (%.0f ms after the loss: mark %.1f ms, grace %lld ms, repair %.1f ms)\n",
                     line.c_str(), std::chrono::duration<double, std::milli>(t1 - lost_at_).count(), mark_ms_,
                     static_cast<long long>(config_.recovery_grace.count()),
                     std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    if (fds[0].revents && !stopping) accept_all(log);
  }
  for (const auto& c : conns_)
    if (c.connected) node_->remove_client(c.id);
  conns_.clear();
  return signal;
}

// ---------------------------------------------------------------------------------------------
// Client

// The client's fabric: UCX endpoints to every memory node, plus the TCP connections that tell
// each server this client is alive; closed with a goodbye after the endpoints are.
class ClientFabric final : public Fabric {
 public:
  ClientFabric(std::unique_ptr<Fabric> inner, std::shared_ptr<std::vector<Fd>> socks)
      : inner_(std::move(inner)), socks_(std::move(socks)) {}
  ~ClientFabric() override {
    const bool clean = std::uncaught_exceptions() == 0;
    inner_.reset();  // endpoints closed (flushed) first
    if (clean)
      for (auto& s : *socks_)
        send_all(s.get(), std::as_bytes(std::span(kBye)), std::chrono::steady_clock::now() + std::chrono::seconds(1));
  }
  std::string_view name() const override { return "ucx"; }
  uint32_t memory_nodes() const override { return inner_->memory_nodes(); }
  uint64_t region_bytes(uint32_t node) const override { return inner_->region_bytes(node); }
  std::span<std::byte> local_region(uint32_t) override { return {}; }
  std::unique_ptr<Transport> connect() override { return inner_->connect(); }
  void register_rpc(uint16_t, RpcHandler) override {
    throw FabricError("ucx service client: this process hosts no memory node: RPC handlers belong to `rdmahash serve`");
  }

 private:
  std::unique_ptr<Fabric> inner_;
  std::shared_ptr<std::vector<Fd>> socks_;  // shared with the liveness check
};

struct Welcome {
  uint32_t client_id = 0, node = 0, nodes = 0;
  detail::UcxRemoteNode remote;
  std::string spec;
  std::string host;  // the server's host_id()
};

// Reads one server message (magic, status, body of at most 1 MiB).
std::pair<uint32_t, std::vector<std::byte>> read_reply(int fd, std::chrono::steady_clock::time_point deadline,
                                                       const std::function<FabricError(const std::string&)>& fail) {
  std::byte head[16];
  if (!recv_all(fd, head, deadline)) throw fail("sent no reply to the handshake within 10 s");
  if (std::memcmp(head, kMagic, 8) != 0) throw fail("is not an rdmahash server (bad reply)");
  Reader hr({head + 8, 8});
  const uint32_t status = hr.u32(), len = hr.u32();
  if (len > kMaxReplyBody) throw fail("sent a reply of " + std::to_string(len) + " bytes (at most 1 MiB)");
  std::vector<std::byte> body(len);
  if (!recv_all(fd, body, deadline)) throw fail("sent a truncated reply");
  if (status == kStatusRefused) {
    // The reason goes to the user's terminal: printable ASCII only, and not a megabyte of it.
    std::string why(reinterpret_cast<const char*>(body.data()), std::min<size_t>(body.size(), 300));
    for (char& ch : why)
      if (ch < 0x20 || ch > 0x7e) ch = '?';
    throw fail("refused the connection: " + why);
  }
  return {status, std::move(body)};
}

Welcome handshake(const std::string& address, const std::string& token, Fd& sock) {
  const std::function<FabricError(const std::string&)> fail = [&](const std::string& why) {
    return FabricError("memory node " + address + " " + why);
  };
  Endpoint ep;
  try {
    ep = parse_endpoint(address);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--connect: ") + e.what());
  }
  sodium_ready();
  sock = Fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (sock.get() < 0) throw FabricError(errno_text("ucx service: socket"));
  if (::connect(sock.get(), reinterpret_cast<const sockaddr*>(&ep.addr), sizeof ep.addr) != 0)
    throw fail(errno_text("cannot be reached (is `rdmahash serve` running there?)"));
  const int one = 1;
  ::setsockopt(sock.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  Nonce client_nonce;
  ::randombytes_buf(client_nonce.data(), client_nonce.size());
  std::vector<std::byte> hello(reinterpret_cast<const std::byte*>(kMagic), reinterpret_cast<const std::byte*>(kMagic) + 8);
  put_u32(hello, kVersion);
  put_u32(hello, 0);
  const auto* cn = reinterpret_cast<const std::byte*>(client_nonce.data());
  hello.insert(hello.end(), cn, cn + kNonceBytes);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  if (!send_all(sock.get(), hello, deadline)) throw fail("closed the connection during the handshake");
  // The challenge: the server's nonce, and whether it asks for the token.
  auto [status, challenge] = read_reply(sock.get(), deadline, fail);
  if (status != kStatusChallenge || challenge.size() != kNonceBytes + 4) throw fail("sent a bad challenge");
  Nonce server_nonce;
  std::memcpy(server_nonce.data(), challenge.data(), kNonceBytes);
  const uint32_t flags = Reader({challenge.data() + kNonceBytes, 4}).u32();
  const bool required = (flags & kChallengeTokenRequired) != 0;
  if (!token.empty() && !required)
    throw fail("asks for no token (it was started without --token-file), but this client has one: it cannot prove "
               "it is the memory node you meant");
  // Without a token the proof is zeros: a server that wants one answers "bad token".
  Mac proof{};
  if (!token.empty()) proof = token_mac(token, kClientLabel, client_nonce, server_nonce);
  if (!send_all(sock.get(), std::as_bytes(std::span(proof)), deadline)) throw fail("closed the connection during the handshake");
  auto [wstatus, body] = read_reply(sock.get(), deadline, fail);
  if (wstatus != kStatusWelcome) throw fail("sent a bad reply (status " + std::to_string(wstatus) + ")");
  if (!token.empty()) {
    Mac key = token_mac(token, kSessionLabel, client_nonce, server_nonce, &proof);
    std::vector<std::byte> plain(body.size() > crypto_secretbox_MACBYTES ? body.size() - crypto_secretbox_MACBYTES : 0);
    const int bad = body.size() < crypto_secretbox_MACBYTES ||
                    ::crypto_secretbox_open_easy(reinterpret_cast<unsigned char*>(plain.data()),
                                                 reinterpret_cast<const unsigned char*>(body.data()), body.size(), kZeroNonce,
                                                 key.data()) != 0;
    sodium_memzero(key.data(), key.size());
    if (bad) throw fail("did not prove it holds the token (its welcome does not open with it): not the memory node you meant?");
    body = std::move(plain);
  }
  Welcome w;
  try {
    Reader r(body);
    w.client_id = r.u32();
    w.node = r.u32();
    w.nodes = r.u32();
    w.remote.worker_address = r.blob();
    w.remote.region_export = r.blob();
    const auto spec = r.blob();
    w.spec.assign(reinterpret_cast<const char*>(spec.data()), spec.size());
    const auto host = r.blob();
    w.host.assign(reinterpret_cast<const char*>(host.data()), host.size());
  } catch (const FabricError& e) {
    throw fail(std::string("sent a bad reply: ") + e.what());
  }
  if (w.remote.worker_address.empty() || w.remote.region_export.size() <= 16) throw fail("sent a bad reply: no address or rkey");
  return w;
}

}  // namespace

std::string load_token_file(const std::string& path, bool create, bool* created) {
  if (created) *created = false;
  if (path.empty()) throw std::invalid_argument("--token-file: empty path");
  sodium_ready();
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (fd.get() < 0 && errno == ENOENT && create) {
    // 32 random bytes as 64 hex digits: printable, so it can be copied to the clients as text.
    unsigned char raw[32];
    ::randombytes_buf(raw, sizeof raw);
    char hex[2 * sizeof raw + 1];
    ::sodium_bin2hex(hex, sizeof hex, raw, sizeof raw);
    sodium_memzero(raw, sizeof raw);
    Fd out(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (out.get() < 0) throw std::invalid_argument(errno_text("--token-file: cannot create '" + path + "'"));
    ::fchmod(out.get(), 0600);  // whatever the umask says
    std::string text = std::string(hex) + "\n";
    const bool ok = ::write(out.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(out.get()) == 0;
    sodium_memzero(hex, sizeof hex);
    sodium_memzero(text.data(), text.size());
    if (!ok) throw std::invalid_argument(errno_text("--token-file: cannot write '" + path + "'"));
    if (created) *created = true;
    fd = Fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  }
  // O_NOFOLLOW fails with ELOOP on a symlink: a token file must be the file itself (a link could
  // point the secret at anything, or anyone's file at the server).
  if (fd.get() < 0 && errno == ELOOP)
    throw std::invalid_argument("--token-file: '" + path + "' is a symbolic link: the token file must not be a symlink "
                                "(give the path of the file itself)");
  if (fd.get() < 0) throw std::invalid_argument(errno_text("--token-file: cannot read '" + path + "'"));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw std::invalid_argument(errno_text("--token-file: cannot stat '" + path + "'"));
  if (!S_ISREG(st.st_mode)) throw std::invalid_argument("--token-file: '" + path + "' is not a regular file");
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw std::invalid_argument("--token-file: '" + path + "' has mode " + mode +
                                ": group or others may read it; make it private (chmod 600)");
  }
  std::string token;
  char buf[512];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::invalid_argument(errno_text("--token-file: cannot read '" + path + "'"));
    if (n == 0) break;
    token.append(buf, static_cast<size_t>(n));
    if (token.size() > 4096) throw std::invalid_argument("--token-file: '" + path + "' is longer than 4096 bytes: not a token");
  }
  sodium_memzero(buf, sizeof buf);
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' ')) token.pop_back();
  if (token.empty()) throw std::invalid_argument("--token-file: '" + path + "' is empty");
  if (token.size() < 16)
    throw std::invalid_argument("--token-file: '" + path + "' holds " + std::to_string(token.size()) +
                                " bytes: a token needs at least 16 (delete it and `rdmahash serve` makes a random one)");
  return token;
}

std::unique_ptr<UcxServer> UcxServer::create(const UcxServerConfig& config) { return std::make_unique<Server>(config); }

UcxConnection connect_ucx_servers(const std::vector<std::string>& addresses, const std::string& token,
                                  const UcxClientOptions& options) {
  if (addresses.empty()) throw std::invalid_argument("--connect needs at least one memory node address");
  std::vector<Fd> socks(addresses.size());
  std::vector<Welcome> w;
  bool all_loopback = true;
  for (size_t i = 0; i < addresses.size(); ++i) {
    w.push_back(handshake(addresses[i], token, socks[i]));
    all_loopback = all_loopback && is_loopback(parse_endpoint(addresses[i]).addr);
    const Welcome& x = w.back();
    if (x.nodes != addresses.size() || x.node != i)
      throw FabricError("memory node " + addresses[i] + " is node " + std::to_string(x.node) + " of " + std::to_string(x.nodes) +
                        ", but --connect names it as node " + std::to_string(i) + " of " + std::to_string(addresses.size()) +
                        " (list the addresses in node order)");
    if (x.spec != w.front().spec)
      throw FabricError("memory nodes " + addresses[0] + " and " + addresses[i] + " serve different tables");
  }
  UcxFabricConfig fc;
  fc.memory_nodes = static_cast<uint32_t>(addresses.size());
  uint64_t bytes = 0;
  std::memcpy(&bytes, w.front().remote.region_export.data() + 8, 8);
  fc.region_bytes = bytes;
  fc.net_devices = all_loopback ? "lo" : "";
  fc.direct_access = options.direct_access;
  fc.client_wait = options.client_wait;
  fc.client_spin = options.client_spin;
  fc.read_coalescing = options.read_coalescing;
  std::vector<detail::UcxRemoteNode> remote;
  const std::string me = host_id();
  const bool shm = shared_memory_allowed();
  for (const auto& x : w) {
    remote.push_back(x.remote);
    remote.back().peer_failure = !(shm && !me.empty() && x.host == me);
  }
  UcxConnection c;
  c.client_id = w.front().client_id;
  c.table_spec = w.front().spec;
  // Liveness: a memory node's TCP connection closes when its process ends (kill -9 included).
  auto shared = std::make_shared<std::vector<Fd>>(std::move(socks));
  auto liveness = [shared, addresses]() -> std::string {
    for (size_t i = 0; i < shared->size(); ++i) {
      pollfd p{(*shared)[i].get(), POLLIN | POLLRDHUP, 0};
      if (::poll(&p, 1, 0) <= 0) continue;
      char b;
      if ((p.revents & (POLLHUP | POLLERR | POLLRDHUP)) || ::recv(p.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0)
        return "memory node " + addresses[i] + " closed its connection (did `rdmahash serve` stop or die?)";
    }
    return {};
  };
  auto fabric = detail::make_ucx_service_client(fc, c.client_id, remote, liveness);
  c.client_wait = dynamic_cast<const UcxFabric&>(*fabric).client_wait();
  c.read_coalescing = dynamic_cast<const UcxFabric&>(*fabric).read_coalescing();
  c.fabric = std::make_unique<ClientFabric>(std::move(fabric), shared);
  return c;
}

}  // namespace rdmahash
