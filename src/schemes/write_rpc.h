// The two-sided write request shared by the schemes whose memory node applies writes (cuckoo,
// continuity): wire format, the node-side dispatcher and the client-side call (internal).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <span>
#include <string>
#include <vector>

#include "rdmahash/engine.h"
#include "rdmahash/table.h"

namespace rdmahash::write_rpc {

// kGet: a lookup answered by the node's CPU under the shard's lock (cuckoo: the fallback of a miss
// that keeps overlapping relocations; continuity, level: of an item older than the seq window
// whose pair / buckets keep changing); its reply carries the value after the Reply header.
enum Op : uint8_t { kFindOrPut = 1, kPut = 2, kUpdate = 3, kErase = 4, kGet = 5 };
enum Code : uint8_t { kOk = 0, kBadRequest = 1, kConfigMismatch = 2, kNotHosted = 3, kInternal = 4 };

struct Request {  // followed by value_len value bytes
  uint8_t op;
  uint8_t pad[3];
  uint32_t node;
  uint32_t cfg_tag;  // a hash of the client's configuration: a mismatch is refused
  uint32_t value_len;
  uint64_t key;
};
static_assert(sizeof(Request) == 24);

struct Reply {  // followed by an error message when code != kOk
  uint8_t code;
  uint8_t status;
  uint16_t pad;
  uint32_t aux;  // scheme-specific count (cuckoo: displacements; continuity: persists)
};
static_assert(sizeof(Reply) == 8);

inline void write_reply(std::vector<std::byte>& out, Code code, Status status, uint32_t aux,
                        const std::string& message = {}, std::span<const std::byte> value = {}) {
  Reply r{};
  r.code = code;
  r.status = static_cast<uint8_t>(status);
  r.aux = aux;
  out.resize(sizeof r + message.size() + value.size());
  std::memcpy(out.data(), &r, sizeof r);
  if (!message.empty()) std::memcpy(out.data() + sizeof r, message.data(), message.size());
  if (!value.empty()) std::memcpy(out.data() + sizeof r + message.size(), value.data(), value.size());
}

struct Result {
  Status status;
  uint32_t aux;
  std::vector<std::byte> value = {};  // kGet on kFound: the value read under the node's lock
};

// Node side: validates `req` against `tag` and the hosted shards, then replies with
// `apply(shard, op, key, value)`, which returns {Status, aux} or throws. Never throws itself: on
// LocalFabric an exception would escape through the client's transport.
template <class Shard, class Apply>
void serve(const char* scheme, uint32_t tag, std::span<const std::byte> req, const std::vector<Shard>& shards,
           std::vector<std::byte>& reply, Apply&& apply) {
  try {
    Request r{};
    if (req.size() < sizeof r) return write_reply(reply, kBadRequest, Status::kNotFound, 0, std::string("short ") + scheme + " request");
    std::memcpy(&r, req.data(), sizeof r);
    if (r.cfg_tag != tag)
      return write_reply(reply, kConfigMismatch, Status::kNotFound, 0,
                         std::string("the client's ") + scheme + " configuration differs from the table's");
    if (r.node >= shards.size() || !shards[r.node])
      return write_reply(reply, kNotHosted, Status::kNotFound, 0,
                         std::string(scheme) + " shard " + std::to_string(r.node) + " is not hosted by this memory node");
    if (req.size() != sizeof r + r.value_len)
      return write_reply(reply, kBadRequest, Status::kNotFound, 0, std::string(scheme) + " request length mismatch");
    if (r.op < kFindOrPut || r.op > kGet)
      return write_reply(reply, kBadRequest, Status::kNotFound, 0, std::string("unknown ") + scheme + " op");
    const Result res = apply(*shards[r.node], static_cast<Op>(r.op), r.key, req.subspan(sizeof r, r.value_len));
    write_reply(reply, kOk, res.status, res.aux, {}, res.value);
  } catch (const InvalidArgument& e) {
    write_reply(reply, kBadRequest, Status::kNotFound, 0, e.what());
  } catch (const std::exception& e) {
    write_reply(reply, kInternal, Status::kNotFound, 0, e.what());
  }
}

// Client side: one RPC to `node`. Throws InvalidArgument when the node refused the request
// (bad request, other configuration) and FabricError for transport or node failures.
inline Task<Result> call(Engine& engine, const char* scheme, uint16_t rpc_id, uint32_t node, uint32_t cfg_tag, Op op,
                         uint64_t key, std::span<const std::byte> value) {
  Request req{};
  req.op = op;
  req.node = node;
  req.cfg_tag = cfg_tag;
  req.value_len = static_cast<uint32_t>(value.size());
  req.key = key;
  std::vector<std::byte> payload(sizeof req + value.size());
  std::memcpy(payload.data(), &req, sizeof req);
  if (!value.empty()) std::memcpy(payload.data() + sizeof req, value.data(), value.size());
  std::vector<std::byte> reply;
  co_await engine.rpc(node, rpc_id, payload.data(), static_cast<uint32_t>(payload.size()), &reply);
  Reply rep{};
  if (reply.size() < sizeof rep) throw FabricError(std::string(scheme) + ": short reply from node " + std::to_string(node));
  std::memcpy(&rep, reply.data(), sizeof rep);
  if (rep.code != kOk) {
    const std::string msg(reinterpret_cast<const char*>(reply.data()) + sizeof rep, reply.size() - sizeof rep);
    if (rep.code == kConfigMismatch || rep.code == kBadRequest) throw InvalidArgument(std::string(scheme) + ": " + msg);
    throw FabricError(std::string(scheme) + ": node " + std::to_string(node) + ": " + msg);
  }
  co_return Result{static_cast<Status>(rep.status), rep.aux, std::vector<std::byte>(reply.begin() + sizeof rep, reply.end())};
}

// Node side: kGet for a shard with owns(key) and find(key) -> std::optional<std::vector<std::byte>>,
// called under the shard's lock (cuckoo, hopscotch).
template <class Shard>
Result get_on_node(const Shard& s, const char* scheme, uint64_t key) {
  if (!s.owns(key)) throw InvalidArgument(std::string(scheme) + ": key does not belong to this shard");
  auto v = s.find(key);
  if (!v) return Result{Status::kNotFound, 0};
  return Result{Status::kFound, 0, std::move(*v)};
}

// Client side: a write (find_or_put, put, update, erase) as the caller sees it: one match for a key
// found, updated or erased; where the scheme's node counts persists in `aux` (continuity, level),
// they go to OpResult::persists and to `*persists`.
inline Task<OpResult> write(Engine& engine, const char* scheme, uint16_t rpc_id, uint32_t node, uint32_t cfg_tag, Op op,
                            uint64_t key, std::span<const std::byte> value, uint64_t* persists = nullptr) {
  const Result res = co_await call(engine, scheme, rpc_id, node, cfg_tag, op, key, value);
  OpResult r;
  r.status = res.status;
  r.matches = (r.status == Status::kFound || r.status == Status::kUpdated || r.status == Status::kErased) ? 1 : 0;
  if (persists) {
    r.persists = res.aux;
    *persists += res.aux;
  }
  co_return r;
}

// Client side: a lookup the owner answers under its shard's lock (the fallback of a one-sided
// lookup that keeps overlapping the node's writes; it linearizes inside the RPC). The value must
// be exactly `value_bytes`; it is copied into `value_out` (as much as fits). `r` carries what the
// one-sided attempts counted (chunks); status and matches are the node's answer.
inline Task<OpResult> get(Engine& engine, const char* scheme, uint16_t rpc_id, uint32_t node, uint32_t cfg_tag, uint64_t key,
                          uint32_t value_bytes, std::span<std::byte> value_out, OpResult r) {
  const Result res = co_await call(engine, scheme, rpc_id, node, cfg_tag, kGet, key, {});
  r.status = res.status;
  r.matches = 0;
  if (res.status == Status::kFound) {
    if (res.value.size() != value_bytes)
      throw FabricError(std::string(scheme) + ": node " + std::to_string(node) + " returned a value of the wrong size");
    if (!value_out.empty()) std::memcpy(value_out.data(), res.value.data(), std::min(value_out.size(), res.value.size()));
    r.matches = 1;
  }
  co_return r;
}

}  // namespace rdmahash::write_rpc
