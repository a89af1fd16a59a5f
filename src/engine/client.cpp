#include "rdmahash/client.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace rdmahash {

Client::Client(Fabric& fabric, const LinearConfig& table, const ProbeConfig& probe)
    : transport_(fabric.connect()),
      engine_(std::make_unique<Engine>(*transport_)),
      table_(std::make_unique<LinearClient>(table, probe, *engine_)) {}

Client::~Client() = default;

OpResult Client::find_or_put(uint64_t key, std::span<const std::byte> value) {
  last_ = {};
  return engine_->run(table_->find_or_put(key, value), &last_);
}
OpResult Client::get(uint64_t key, std::span<std::byte> value_out) {
  last_ = {};
  return engine_->run(table_->get(key, value_out), &last_);
}
OpResult Client::update(uint64_t key, std::span<const std::byte> value) {
  last_ = {};
  return engine_->run(table_->update(key, value), &last_);
}
OpResult Client::put(uint64_t key, std::span<const std::byte> value) {
  last_ = {};
  return engine_->run(table_->put(key, value), &last_);
}
OpResult Client::erase(uint64_t key) {
  last_ = {};
  return engine_->run(table_->erase(key), &last_);
}

namespace {
Task<void> store(Task<OpResult> t, OpResult* out) { *out = co_await std::move(t); }
}  // namespace

std::vector<OpResult> Client::find_or_put_many(std::span<const uint64_t> keys, std::span<const std::byte> values,
                                               uint32_t depth) {
  const size_t vb = table_->config().format == SlotFormat::kSet ? 0 : table_->config().value_bytes;
  if (!values.empty() && values.size() != keys.size() * vb)
    throw InvalidArgument("values must hold keys.size() * value_bytes = " + std::to_string(keys.size() * vb) + " bytes");
  // Validate every key up front so that a bad key fails the call before anything is inserted.
  for (uint64_t k : keys) table_->validate_key(k);
  std::vector<OpResult> out(keys.size());
  last_ = {};
  std::exception_ptr first_error;
  // Multi-find-or-put where the table has one (LinearClient::find_or_put_batch: one batch per
  // round, no coroutine per key), else one find_or_put per key, `depth` in flight.
  if (table_->find_or_put_batch(
          keys.size(), depth, [keys](uint64_t i) { return keys[i]; },
          [&](uint64_t i, uint64_t, std::span<std::byte> v) {
            if (!values.empty()) std::memcpy(v.data(), values.data() + i * vb, std::min(vb, v.size()));
          },
          [&](const Engine::Completion& c, const OpResult& r) {
            last_.add(c.stats);
            if (c.error) {
              if (!first_error) first_error = c.error;
              return;
            }
            out[c.index] = r;
          })) {
    if (first_error) std::rethrow_exception(first_error);
    return out;
  }
  engine_->run_many(
      keys.size(), depth,
      [&](uint64_t i) {
        return store(table_->find_or_put(keys[i], values.empty() ? std::span<const std::byte>{}
                                                                  : values.subspan(i * vb, vb)),
                     &out[i]);
      },
      [&](const Engine::Completion& c) {
        last_.add(c.stats);
        if (c.error && !first_error) first_error = c.error;
      });
  if (first_error) std::rethrow_exception(first_error);
  return out;
}

std::vector<OpResult> Client::get_many(std::span<const uint64_t> keys, std::span<std::byte> values_out,
                                       uint32_t depth) {
  const size_t vb = table_->config().format == SlotFormat::kSet ? 0 : table_->config().value_bytes;
  if (!values_out.empty() && values_out.size() != keys.size() * vb)
    throw InvalidArgument("values_out must hold keys.size() * value_bytes = " + std::to_string(keys.size() * vb) +
                          " bytes");
  for (uint64_t k : keys) table_->validate_key(k);
  std::vector<OpResult> out(keys.size());
  last_ = {};
  std::exception_ptr first_error;
  // Multi-get, `depth` keys in flight (LinearClient::get_batch): each key's answer comes to on_get
  // just before its completion, which files it under the key's index.
  // The value is copied here: on_get's span is valid only during the call (a resumed lookup's
  // buffer is gone by the time its completion runs).
  struct Stash final : GetVisitor {
    OpResult r;
    std::vector<std::byte> value;
    void on_get(uint64_t, const OpResult& res, std::span<const std::byte> v) override {
      r = res;
      value.assign(v.begin(), v.end());
    }
  } stash;
  auto done = [&](const Engine::Completion& c) {
    last_.add(c.stats);
    if (c.error) {
      if (!first_error) first_error = c.error;
      return;
    }
    out[c.index] = stash.r;
    if (!values_out.empty() && !stash.value.empty())
      std::memcpy(values_out.data() + c.index * vb, stash.value.data(), std::min(vb, stash.value.size()));
  };
  if (!table_->get_batch(keys.size(), depth, [keys](uint64_t i) { return keys[i]; }, table_->config().value_bytes,
                         stash, done)) {
    // A table without a multi-get (heap records): one get per key, `depth` in flight.
    engine_->run_many(
        keys.size(), depth,
        [&](uint64_t i) {
          return store(table_->get(keys[i], values_out.empty() ? std::span<std::byte>{} : values_out.subspan(i * vb, vb)),
                       &out[i]);
        },
        [&](const Engine::Completion& c) {
          last_.add(c.stats);
          if (c.error && !first_error) first_error = c.error;
        });
  }
  if (first_error) std::rethrow_exception(first_error);
  return out;
}

}  // namespace rdmahash
