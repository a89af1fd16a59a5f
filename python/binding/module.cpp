// The Python module `rdmahash` (pybind11): a table of any registered scheme, in-process
// (LocalFabric) or spread over the ranks of an mpi4py communicator (UcxFabric, PGAS layout: every
// rank hosts a shard and is a client, as `rdmahash bench --fabric ucx --symmetric`).
//
// Batches: keys are a 1-D numpy uint64 array (or, for byte-key schemes, a list of bytes), values a
// C-contiguous numpy array of n * value_bytes bytes (or a list of bytes). A batch runs on the
// table's Engine with `depth` operations in flight (Engine::run_many), with the GIL released; one
// table is used by one thread at a time (a mutex serialises callers; a call that was waiting for
// it while another thread closed the table raises ValueError). Statuses come back as a numpy
// uint8 array of rdmahash.Status values.
//
// Errors: C++ InvalidArgument -> rdmahash.InvalidArgument (a ValueError), FabricError ->
// rdmahash.FabricError, RetryBudgetExceeded -> rdmahash.RetryBudgetExceeded (a FabricError),
// MemoryNodeLost -> rdmahash.MemoryNodeLost (the table is unusable afterwards). Bad Python input
// (dtype, shape, lengths, option names and values) raises TypeError / ValueError before any
// request. An error inside a batch is raised after the batch: the other operations of the batch
// ran (their outcome is in the table, not in a return value).
#include <mpi.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <rdmahash/engine.h>
#include <rdmahash/fabric.h>
#include <rdmahash/linear.h>
#include <rdmahash/scheme.h>
#include <rdmahash/table.h>
#include <rdmahash/ucx_fabric.h>
#include <rdmahash/ucx_service.h>

#include "bench/driver.h"   // kConnectClientIds: the id space of --connect clients
#include "bench/options.h"  // apply_table_spec / table_options: the served table's options, as bench --connect reads them
#include "bench/sysinfo.h"  // mem_available_bytes / memory_error: the memory check of `rdmahash bench`

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace py = pybind11;
using namespace rdmahash;

namespace {

// Python exception types (created in PYBIND11_MODULE).
PyObject* g_error = nullptr;
PyObject* g_invalid = nullptr;
PyObject* g_fabric = nullptr;
PyObject* g_retry = nullptr;
PyObject* g_lost = nullptr;

class Table;
std::mutex g_open_mu;
std::vector<Table*> g_open_mpi;  // MPI tables not yet closed: closed at interpreter exit, before mpi4py finalises MPI

class NoRecords final : public RecordSource {
 public:
  uint64_t count() const override { return 0; }
  uint64_t next() override { return 0; }
  void fill(uint64_t, std::span<std::byte>) const override {}
};

// --- options --------------------------------------------------------------------------------

template <class T>
T as_uint(const std::string& name, const py::handle& v, uint64_t max) {
  if (!py::isinstance<py::int_>(v) || py::isinstance<py::bool_>(v))
    throw py::type_error("option " + name + " must be an int");
  const auto x = v.cast<long long>();
  if (x < 0 || static_cast<uint64_t>(x) > max)
    throw py::value_error("option " + name + " must be in [0, " + std::to_string(max) + "]");
  return static_cast<T>(x);
}

template <class E>
E as_word(const std::string& name, const py::handle& v, std::optional<E> (*parse)(std::string_view), const char* words) {
  if (!py::isinstance<py::str>(v)) throw py::type_error("option " + name + " must be a str (" + words + ")");
  const auto s = v.cast<std::string>();
  auto e = parse(s);
  if (!e) throw py::value_error("option " + name + "='" + s + "': expected one of " + words);
  return *e;
}

// The table options of a Python call: the named arguments and the scheme's own options (kwargs,
// TableOptions' field names).
TableOptions table_options(const std::string& scheme_name, uint64_t capacity, uint32_t value_bytes, double load_factor,
                           uint32_t memory_nodes, const py::kwargs& kw) {
  const SchemeDescriptor* d = find_scheme(scheme_name);
  if (!d) throw py::value_error("no scheme '" + scheme_name + "' (available: " + scheme_names() + ")");
  if (capacity == 0) throw py::value_error("capacity must be at least 1 (the keys the table may hold)");
  TableOptions o;
  o.scheme = d->id;
  o.memory_nodes = memory_nodes;
  o.records = capacity;  // sizes the table; it starts empty (nothing is bulk-loaded)
  o.inserts = capacity;
  o.load_factor = load_factor;
  o.value_bytes = value_bytes;
  o.command = "rdmahash (python)";
  for (auto [k, v] : kw) {
    const auto name = k.cast<std::string>();
    if (name == "seed") o.seed = as_uint<uint64_t>(name, v, UINT64_MAX);
    else if (name == "key_bytes") o.key_bytes = as_uint<uint32_t>(name, v, 256);
    else if (name == "writes") o.writes = as_uint<uint64_t>(name, v, 1ULL << 40);
    else if (name == "inserts") o.inserts = as_uint<uint64_t>(name, v, 1ULL << 40);
    else if (name == "storage") o.storage = as_word<Storage>(name, v, parse_storage, "inline, heap, heap4");
    else if (name == "slot_format") o.slot_format = as_word<SlotFormatChoice>(name, v, parse_slot_format, "auto, set, inline");
    else if (name == "tail_slots") o.tail_slots = as_uint<uint64_t>(name, v, 1ULL << 36);
    else if (name == "chunk") o.chunk = as_uint<uint32_t>(name, v, 65536);
    else if (name == "max_chunks") o.max_chunks = as_uint<uint32_t>(name, v, UINT32_MAX);
    else if (name == "slots_per_bucket") o.slots_per_bucket = as_uint<uint32_t>(name, v, 64);
    else if (name == "cuckoo_lookup") o.cuckoo_lookup = as_word<CuckooLookup>(name, v, parse_cuckoo_lookup, "parallel, sequential");
    else if (name == "race_groups") o.race_groups = as_uint<uint32_t>(name, v, UINT32_MAX);
    else if (name == "initial_depth") o.initial_depth = as_uint<uint32_t>(name, v, 64);
    else if (name == "race_dir_cache") o.race_dir_cache = as_word<Switch>(name, v, parse_switch, "on, off");
    else if (name == "sbuckets") o.sbuckets = as_uint<uint32_t>(name, v, 64);
    else if (name == "max_resizes") o.max_resizes = as_uint<uint32_t>(name, v, 64);
    else if (name == "neighborhood") o.neighborhood = as_uint<uint32_t>(name, v, 64);
    else
      throw py::type_error("unknown option '" + name +
                           "' (table options: seed, key_bytes, writes, inserts, storage, slot_format, tail_slots, chunk, "
                           "max_chunks, slots_per_bucket, cuckoo_lookup, race_groups, initial_depth, race_dir_cache, "
                           "sbuckets, max_resizes, neighborhood)");
  }
  if (!(load_factor > 0 && load_factor < 1)) throw py::value_error("load_factor must be in (0, 1)");
  if (std::string e = check_table_options(o); !e.empty()) throw InvalidArgument(format_option_error(e));
  return o;
}

// --- operations as coroutines ---------------------------------------------------------------

Task<void> op_find_or_put(KvClient& c, uint64_t k, std::span<const std::byte> v, uint8_t* st) {
  *st = static_cast<uint8_t>((co_await c.find_or_put(k, v)).status);
}
Task<void> op_put(KvClient& c, uint64_t k, std::span<const std::byte> v, uint8_t* st) {
  *st = static_cast<uint8_t>((co_await c.put(k, v)).status);
}
Task<void> op_update(KvClient& c, uint64_t k, std::span<const std::byte> v, uint8_t* st) {
  *st = static_cast<uint8_t>((co_await c.update(k, v)).status);
}
Task<void> op_get(KvClient& c, uint64_t k, std::span<std::byte> out, uint8_t* st) {
  *st = static_cast<uint8_t>((co_await c.get(k, out)).status);
}
Task<void> op_erase(KvClient& c, uint64_t k, uint8_t* st) { *st = static_cast<uint8_t>((co_await c.erase(k)).status); }

Task<void> opb_find_or_put(KvClient& c, const std::string& k, std::span<const std::byte> v, uint8_t* st) {
  *st = static_cast<uint8_t>((co_await c.find_or_put(KeyView(std::string_view(k)), v)).status);
}
Task<void> opb_put(KvClient& c, const std::string& k, std::span<const std::byte> v, uint8_t* st) {
  *st = static_cast<uint8_t>((co_await c.put(KeyView(std::string_view(k)), v)).status);
}
Task<void> opb_update(KvClient& c, const std::string& k, std::span<const std::byte> v, uint8_t* st) {
  *st = static_cast<uint8_t>((co_await c.update(KeyView(std::string_view(k)), v)).status);
}
Task<void> opb_get(KvClient& c, const std::string& k, std::vector<std::byte>* out, uint8_t* st) {
  *st = static_cast<uint8_t>((co_await c.get(KeyView(std::string_view(k)), out)).status);
}
Task<void> opb_erase(KvClient& c, const std::string& k, uint8_t* st) {
  *st = static_cast<uint8_t>((co_await c.erase(KeyView(std::string_view(k)))).status);
}

std::span<const std::byte> bytes_of(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

enum class Op { kFindOrPut, kPut, kUpdate, kGet, kErase };
const char* op_name(Op op) {
  switch (op) {
    case Op::kFindOrPut: return "find_or_put";
    case Op::kPut: return "put";
    case Op::kUpdate: return "update";
    case Op::kGet: return "get";
    case Op::kErase: return "erase";
  }
  return "?";
}

// --- the table ------------------------------------------------------------------------------

class Table {
 public:
  // In-process: `memory_nodes` regions of one LocalFabric, one client.
  static std::unique_ptr<Table> local(const std::string& scheme_name, uint64_t capacity, uint32_t value_bytes,
                                      double load_factor, uint32_t memory_nodes, uint32_t depth, const py::kwargs& kw) {
    if (memory_nodes == 0 || memory_nodes > 64) throw py::value_error("memory_nodes must be in [1, 64]");
    auto t = std::unique_ptr<Table>(new Table);
    t->options_ = table_options(scheme_name, capacity, value_bytes, load_factor, memory_nodes, kw);
    t->set_depth(depth);
    {
      py::gil_scoped_release nogil;
      t->table_ = make_table(t->options_);
      const uint64_t region = t->table_->region_bytes();
      // Refused up front, as `rdmahash bench` refuses it: the regions are zero-filled as they are
      // allocated, so a table past MemAvailable would swap or meet the OOM killer, not fail cleanly.
      const uint64_t need = region > UINT64_MAX / memory_nodes ? UINT64_MAX : region * memory_nodes;
      if (const uint64_t avail = bench::mem_available_bytes(); avail && need > avail)
        throw InvalidArgument(bench::memory_error(need, avail, std::to_string(memory_nodes) + " shard(s) of " + bench::bytes_text(region),
                                                  "use a lower capacity, a lower value_bytes or fewer memory_nodes"));
      t->fabric_ = make_local_fabric(std::vector<uint64_t>(memory_nodes, region));
      NoRecords none;
      t->table_->load(*t->fabric_, none);
      t->open_client(0);
    }
    return t;
  }

  // Over MPI: collective over `comm` (which must be congruent to MPI_COMM_WORLD: the fabric
  // bootstraps over MPI_COMM_WORLD); every rank hosts one shard and runs one client.
  static std::unique_ptr<Table> mpi(const py::object& comm, const std::string& scheme_name, uint64_t capacity,
                                    uint32_t value_bytes, double load_factor, uint32_t depth, const py::kwargs& kw) {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (!initialized || finalized) throw py::value_error("MPI is not initialised (import mpi4py.MPI first)");
    if (!py::hasattr(comm, "py2f")) throw py::type_error("comm must be an mpi4py communicator (e.g. MPI.COMM_WORLD)");
    const MPI_Comm c = MPI_Comm_f2c(comm.attr("py2f")().cast<MPI_Fint>());
    int cmp = MPI_UNEQUAL;
    if (c == MPI_COMM_NULL || MPI_Comm_compare(c, MPI_COMM_WORLD, &cmp) != MPI_SUCCESS ||
        (cmp != MPI_IDENT && cmp != MPI_CONGRUENT))
      throw py::value_error("comm must be MPI.COMM_WORLD or congruent to it (the UCX fabric bootstraps over MPI_COMM_WORLD)");
    int size = 1, rank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    auto t = std::unique_ptr<Table>(new Table);
    t->options_ = table_options(scheme_name, capacity, value_bytes, load_factor, static_cast<uint32_t>(size), kw);
    if (rdmahash::caps(t->options_.scheme).bulk_load_needs_all_nodes && size > 1)
      throw InvalidArgument("--scheme " + std::string(rdmahash::scheme(t->options_.scheme).name) +
                            " formats its table in the process hosting every memory node: mpi_table() over " +
                            std::to_string(size) + " ranks (every rank a memory node) cannot build it; use local_table(), "
                            "or one rank (as `rdmahash bench` refuses it with --symmetric)");
    t->set_depth(depth);
    {
      py::gil_scoped_release nogil;
      t->table_ = make_table(t->options_);
      // Refused up front on every rank, as local_table() and `rdmahash bench` refuse it: each rank
      // zero-fills a shard, and the shards of one host must fit in its MemAvailable together.
      bench::check_host_memory_mpi(t->table_->region_bytes(), "one host's shards (" + bench::bytes_text(t->table_->region_bytes()) + " each)",
                                   "use a lower capacity, a lower value_bytes or fewer ranks per host");
      UcxFabricConfig fc;
      fc.symmetric = true;
      fc.region_bytes = t->table_->region_bytes();
      auto f = UcxFabric::create(fc);
      t->ucx_ = f.get();
      t->fabric_ = std::move(f);
      NoRecords none;
      t->table_->load(*t->fabric_, none);
      t->ucx_->barrier();
      t->open_client(static_cast<uint32_t>(rank));
    }
    t->rank_ = rank;
    t->size_ = size;
    {
      std::lock_guard lock(g_open_mu);
      g_open_mpi.push_back(t.get());
    }
    static bool registered = false;  // atexit runs last-registered first: mpi4py registered its MPI_Finalize before
    if (!registered) {
      registered = true;
      py::module_::import("atexit").attr("register")(py::cpp_function(&Table::close_all_mpi));
    }
    return t;
  }

  // A client of running `rdmahash serve` memory nodes 0..K-1 (bench --connect's path): the table
  // is theirs (scheme, geometry, loaded records); this process only connects.
  static std::unique_ptr<Table> connect(const std::vector<std::string>& addresses, const std::string& token_file, uint32_t depth) {
    if (addresses.empty()) throw py::value_error("addresses: give at least one host:port (memory node 0 first)");
    auto t = std::unique_ptr<Table>(new Table);
    t->set_depth(depth);
    py::gil_scoped_release nogil;
    std::string token;
    if (!token_file.empty()) {
      try {
        token = load_token_file(token_file, false);
      } catch (const std::invalid_argument& e) {
        throw InvalidArgument(std::string("token_file: ") + e.what());
      }
    }
    UcxConnection conn = connect_ucx_servers(addresses, token);
    bench::BenchOptions o;
    bench::apply_table_spec(o, conn.table_spec);
    o.workloads = {bench::Workload::kGet};  // as `rdmahash serve` built it (run_serve)
    t->options_ = bench::table_options(o, o.load_factors.at(0));
    t->table_ = make_table(t->options_);
    if (t->table_->region_bytes() != conn.fabric->region_bytes(0))
      throw FabricError("the table of memory node 0 has a region of " + std::to_string(conn.fabric->region_bytes(0)) +
                        " bytes, but its table spec gives " + std::to_string(t->table_->region_bytes()) +
                        ": this module and the server are different builds");
    if (rdmahash::caps(t->options_.scheme).client_ids && conn.client_id >= bench::kConnectClientIds)
      throw InvalidArgument(std::string(rdmahash::scheme(t->options_.scheme).name) + ": memory node 0 has given out " +
                            std::to_string(conn.client_id) + " client ids; the scheme needs ids below " +
                            std::to_string(bench::kConnectClientIds) + ": restart the servers");
    t->fabric_ = std::move(conn.fabric);
    t->open_client(conn.client_id % bench::kConnectClientIds);
    return t;
  }

  static void close_all_mpi() {
    std::vector<Table*> open;
    {
      std::lock_guard lock(g_open_mu);
      open = g_open_mpi;
    }
    for (Table* t : open) t->close();
  }

  ~Table() {
    try {
      close_now();
    } catch (...) {
    }
  }

  void set_depth(uint32_t d) {
    if (d == 0 || d > 4096) throw py::value_error("depth must be in [1, 4096]");
    depth_ = d;
  }
  uint32_t depth() const { return depth_; }
  uint32_t value_bytes() const { return value_bytes_; }
  std::string scheme() const { return rdmahash::scheme(options_.scheme).name; }
  // Lock-free (a batch may hold the lock for long): the description taken when the table opened.
  std::string describe() const { return open_ ? description_ : "closed"; }
  bool byte_keys() const { return rdmahash::caps(options_.scheme).byte_keys; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  bool closed() const { return !open_; }

  // Every rank's operations before it are complete on every rank (keeps this rank's shard served
  // meanwhile). MPI tables only; a no-op in-process.
  void barrier() {
    check_open();
    locked([&] {
      if (ucx_) guard([&] { ucx_->barrier(); });
    });
  }

  // Collective for MPI tables: ends this rank's client, serves the others until they are done.
  void close() {
    py::gil_scoped_release nogil;
    std::lock_guard lock(mu_);
    close_now();
  }

  // For scripts/python_overhead.py: the same batches as a C++ program would issue them (one
  // Engine::run_many per batch of `batch` keys, no Python in the loop); returns the seconds taken.
  double native_loop(const std::string& op_name_s, const py::array_t<uint64_t, py::array::c_style>& keys, size_t batch) {
    check_open();
    if (batch == 0) throw py::value_error("batch must be at least 1");
    const Op op = op_name_s == "get" ? Op::kGet : op_name_s == "find_or_put" ? Op::kFindOrPut : op_name_s == "put" ? Op::kPut : Op::kErase;
    if (op_name_s != "get" && op_name_s != "find_or_put" && op_name_s != "put" && op_name_s != "erase")
      throw py::value_error("op must be get, find_or_put, put or erase");
    const size_t n = static_cast<size_t>(keys.shape(0));
    const uint64_t* kp = keys.data();
    check_key_range(op, kp, n);  // as run() checks them
    std::vector<std::byte> val(std::max<size_t>(value_bytes_, 1) * std::min(n, batch));
    std::vector<uint8_t> st(std::min(n, batch));
    double seconds = 0;
    locked([&] {
      const auto t0 = std::chrono::steady_clock::now();
      for (size_t lo = 0; lo < n; lo += batch) {
        const size_t m = std::min(batch, n - lo);
        const uint64_t* k = kp + lo;
        const size_t vb = value_bytes_;
        batch_run(op, m, k, [&](uint64_t i) -> Task<void> {
          switch (op) {
            case Op::kGet: return op_get(*client_, k[i], std::span<std::byte>(val.data() + i * vb, vb), &st[i]);
            case Op::kFindOrPut: return op_find_or_put(*client_, k[i], std::span<const std::byte>(val.data() + i * vb, vb), &st[i]);
            case Op::kPut: return op_put(*client_, k[i], std::span<const std::byte>(val.data() + i * vb, vb), &st[i]);
            default: return op_erase(*client_, k[i], &st[i]);
          }
        });
      }
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
    return seconds;
  }

  // uint64 keys (numpy) or byte keys (list of bytes).
  py::object run(Op op, const py::handle& keys, const py::handle& values) {
    check_open();
    if (py::isinstance<py::list>(keys) || py::isinstance<py::tuple>(keys)) return run_bytes(op, keys, values);
    if (!py::isinstance<py::array>(keys))
      throw py::type_error(std::string(op_name(op)) + ": keys must be a 1-D numpy array of dtype uint64 (or a list of bytes)");
    auto karr = py::reinterpret_borrow<py::array>(keys);
    if (karr.dtype().kind() != 'u' || karr.dtype().itemsize() != 8)
      throw py::type_error(std::string(op_name(op)) + ": keys must have dtype uint64, not " +
                           py::str(karr.dtype()).cast<std::string>());
    if (karr.ndim() != 1) throw py::value_error(std::string(op_name(op)) + ": keys must be a 1-D array");
    auto k = py::array_t<uint64_t, py::array::c_style>::ensure(karr);
    const size_t n = static_cast<size_t>(k.shape(0));
    const uint64_t* kp = k.data();
    check_key_range(op, kp, n);
    const size_t vb = value_bytes_;
    const bool takes_values = op == Op::kFindOrPut || op == Op::kPut || op == Op::kUpdate;
    py::array_t<uint8_t> status(static_cast<py::ssize_t>(n));
    uint8_t* st = status.mutable_data();
    if (takes_values) {
      const std::byte* vp = nullptr;
      py::array varr;
      std::vector<std::byte> zeros;
      if (values.is_none()) {
        if (vb && op != Op::kFindOrPut)
          throw py::value_error(std::string(op_name(op)) + ": values are required (the table has value_bytes " + std::to_string(vb) + ")");
        if ((op == Op::kPut || op == Op::kUpdate) && vb == 0)
          throw InvalidArgument(std::string(op_name(op)) + " replaces values: this table has none (value_bytes 0)");
        zeros.assign(n * vb, std::byte{0});
        vp = zeros.data();
      } else {
        if (vb == 0) throw py::value_error(std::string(op_name(op)) + ": this table has no values (value_bytes 0): pass values=None");
        if (!py::isinstance<py::array>(values))
          throw py::type_error(std::string(op_name(op)) + ": values must be a numpy array of len(keys) x value_bytes bytes");
        varr = py::reinterpret_borrow<py::array>(values);
        // The values' bytes are stored as they are: only plain data is a value (an object array
        // holds pointers, a unicode array code points, a datetime array units the bytes do not carry).
        if (std::string_view("biufcSV").find(varr.dtype().kind()) == std::string_view::npos ||
            varr.dtype().attr("hasobject").cast<bool>())
          throw py::type_error(std::string(op_name(op)) + ": values must be plain numbers or bytes (e.g. dtype uint8, uint64, S8), not dtype " +
                               py::str(varr.dtype()).cast<std::string>());
        if (!(varr.flags() & py::array::c_style))
          throw py::value_error(std::string(op_name(op)) + ": values must be C-contiguous (numpy.ascontiguousarray)");
        if (varr.ndim() == 0 || static_cast<size_t>(varr.shape(0)) != n || static_cast<size_t>(varr.nbytes()) != n * vb)
          throw py::value_error(std::string(op_name(op)) + ": values must have len(keys) = " + std::to_string(n) +
                                " rows of value_bytes = " + std::to_string(vb) + " bytes each (got shape " +
                                py::str(varr.attr("shape")).cast<std::string>() + ", dtype " +
                                py::str(varr.dtype()).cast<std::string>() + ")");
        vp = static_cast<const std::byte*>(varr.data());
      }
      locked([&] {
        batch_run(op, n, kp, [&](uint64_t i) -> Task<void> {
          const std::span<const std::byte> v(vp + i * vb, vb);
          if (op == Op::kFindOrPut) return op_find_or_put(*client_, kp[i], v, st + i);
          if (op == Op::kPut) return op_put(*client_, kp[i], v, st + i);
          return op_update(*client_, kp[i], v, st + i);
        });
      });
      return status;
    }
    if (op == Op::kErase) {
      locked([&] { batch_run(op, n, kp, [&](uint64_t i) { return op_erase(*client_, kp[i], st + i); }); });
      return status;
    }
    py::array_t<uint8_t> out({static_cast<py::ssize_t>(n), static_cast<py::ssize_t>(vb)});
    std::byte* op_out = reinterpret_cast<std::byte*>(out.mutable_data());
    if (n != 0 && vb != 0) std::memset(op_out, 0, n * vb);
    locked([&] {
      batch_run(op, n, kp, [&](uint64_t i) { return op_get(*client_, kp[i], std::span<std::byte>(op_out + i * vb, vb), st + i); });
    });
    return py::make_tuple(status, out);
  }

 private:
  Table() = default;

  void open_client(uint32_t id) {
    value_bytes_ = table_->value_bytes();
    key_bits_ = table_->key_bits();
    description_ = table_->describe();
    transport_ = fabric_->connect();
    engine_ = std::make_unique<Engine>(*transport_);
    ClientOptions co;
    co.client_id = id;
    client_ = table_->make_client(*engine_, co).client;
    open_ = true;
  }

  // Under mu_ (or with no other user: construction, destruction).
  void drop_client() {
    open_ = false;
    client_.reset();
    engine_.reset();
    transport_.reset();
  }

  // Without mu_ this only refuses early: a close() may still come before the caller takes mu_.
  void check_open() const {
    if (!open_) throw py::value_error("the table is closed");
  }

  // Runs `f` holding mu_, with the GIL released. A caller waiting for mu_ (behind a long batch)
  // passed check_open() before a close() that took mu_ first: the table is checked open again here.
  template <class F>
  void locked(F&& f) {
    py::gil_scoped_release nogil;
    std::lock_guard lock(mu_);
    check_open();
    f();
  }

  // Keys of a scheme with fewer than 64 key bits (it uses the top bits itself) are refused before any request.
  void check_key_range(Op op, const uint64_t* kp, size_t n) const {
    if (key_bits_ >= 64) return;
    for (size_t i = 0; i < n; ++i)
      if (kp[i] >> key_bits_)
        throw InvalidArgument(std::string(op_name(op)) + ": key " + std::to_string(kp[i]) + " (index " + std::to_string(i) +
                              ") is outside the table's key range [0, 2^" + std::to_string(key_bits_) + ")");
  }

  // Runs `f`, mapping MemoryNodeLost to a closed client (the fabric is unusable).
  template <class F>
  void guard(F&& f) {
    try {
      f();
    } catch (const MemoryNodeLost&) {
      drop_client();
      throw;
    }
  }

  template <class Make>
  void batch_run(Op op, size_t n, const uint64_t* keys, Make&& make) {
    std::exception_ptr first;
    uint64_t first_index = 0;
    guard([&] {
      engine_->run_many(
          n, depth_, [&](uint64_t i) { return make(i); },
          [&](const Engine::Completion& c) {
            if (c.error && (!first || c.index < first_index)) first = c.error, first_index = c.index;
          });
    });
    if (first) rethrow_at(op, first, first_index, keys ? std::to_string(keys[first_index]) : std::string());
  }

  [[noreturn]] void rethrow_at(Op op, std::exception_ptr e, uint64_t index, const std::string& key) {
    const std::string where = std::string(op_name(op)) + "[" + std::to_string(index) + "]" + (key.empty() ? "" : " (key " + key + ")");
    try {
      std::rethrow_exception(e);
    } catch (const InvalidArgument& x) {
      throw InvalidArgument(where + ": " + x.what());
    } catch (const RetryBudgetExceeded& x) {
      throw RetryBudgetExceeded(where + ": " + x.what());
    } catch (const FabricError& x) {
      throw FabricError(where + ": " + x.what());
    }
  }

  py::object run_bytes(Op op, const py::handle& keys, const py::handle& values) {
    if (!byte_keys())
      throw InvalidArgument(std::string(op_name(op)) + ": --scheme " + scheme() +
                            " takes 8-byte integer keys (a numpy uint64 array); byte-string keys need a scheme with byte keys (race)");
    std::vector<std::string> ks, vs;
    auto seq = py::reinterpret_borrow<py::sequence>(keys);
    ks.reserve(seq.size());
    for (size_t i = 0; i < seq.size(); ++i) {
      py::handle h = seq[i];
      if (!py::isinstance<py::bytes>(h))
        throw py::type_error(std::string(op_name(op)) + ": keys[" + std::to_string(i) + "] must be bytes");
      ks.push_back(h.cast<std::string>());
    }
    const size_t n = ks.size();
    const bool takes_values = op == Op::kFindOrPut || op == Op::kPut || op == Op::kUpdate;
    if (takes_values) {
      if (values.is_none()) {
        vs.assign(n, std::string());
      } else {
        if (!py::isinstance<py::list>(values) && !py::isinstance<py::tuple>(values))
          throw py::type_error(std::string(op_name(op)) + ": with byte keys, values must be a list of bytes");
        auto vseq = py::reinterpret_borrow<py::sequence>(values);
        if (vseq.size() != n)
          throw py::value_error(std::string(op_name(op)) + ": " + std::to_string(n) + " keys but " + std::to_string(vseq.size()) + " values");
        for (size_t i = 0; i < n; ++i) {
          py::handle h = vseq[i];
          if (!py::isinstance<py::bytes>(h))
            throw py::type_error(std::string(op_name(op)) + ": values[" + std::to_string(i) + "] must be bytes");
          vs.push_back(h.cast<std::string>());
        }
      }
    } else if (!values.is_none()) {
      throw py::type_error(std::string(op_name(op)) + " takes no values");
    }
    // Bad keys and values are refused by the client before any request; checked here for the whole batch first.
    for (size_t i = 0; i < n; ++i) {
      if (ks[i].empty() || ks[i].size() > kMaxKeyBytes)
        throw InvalidArgument(std::string(op_name(op)) + ": keys[" + std::to_string(i) + "] has " + std::to_string(ks[i].size()) +
                              " bytes; byte keys have 1 to " + std::to_string(kMaxKeyBytes));
      if (takes_values && vs[i].size() > kMaxValueBytes)
        throw InvalidArgument(std::string(op_name(op)) + ": values[" + std::to_string(i) + "] has " + std::to_string(vs[i].size()) +
                              " bytes; at most " + std::to_string(kMaxValueBytes));
    }
    std::vector<uint8_t> st(n);
    std::vector<std::vector<std::byte>> out(op == Op::kGet ? n : 0);
    locked([&] {
      batch_run(op, n, nullptr, [&](uint64_t i) -> Task<void> {
        switch (op) {
          case Op::kFindOrPut: return opb_find_or_put(*client_, ks[i], bytes_of(vs[i]), &st[i]);
          case Op::kPut: return opb_put(*client_, ks[i], bytes_of(vs[i]), &st[i]);
          case Op::kUpdate: return opb_update(*client_, ks[i], bytes_of(vs[i]), &st[i]);
          case Op::kGet: return opb_get(*client_, ks[i], &out[i], &st[i]);
          case Op::kErase: break;
        }
        return opb_erase(*client_, ks[i], &st[i]);
      });
    });
    py::array_t<uint8_t> status(static_cast<py::ssize_t>(n));
    std::memcpy(status.mutable_data(), st.data(), n);
    if (op != Op::kGet) return status;
    py::list vals;
    for (size_t i = 0; i < n; ++i) {
      if (st[i] == static_cast<uint8_t>(Status::kFound))
        vals.append(py::bytes(reinterpret_cast<const char*>(out[i].data()), out[i].size()));
      else
        vals.append(py::none());
    }
    return py::make_tuple(status, vals);
  }

  void close_now() {
    if (!table_) return;
    if (ucx_) {
      std::lock_guard lock(g_open_mu);
      std::erase(g_open_mpi, this);
    }
    drop_client();
    if (ucx_) {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) {
        ucx_->client_done();
        ucx_->serve();
        ucx_->barrier();
      }
    }
    fabric_.reset();
    ucx_ = nullptr;
    table_.reset();
  }

  TableOptions options_;
  std::unique_ptr<SchemeTable> table_;
  std::unique_ptr<Fabric> fabric_;
  UcxFabric* ucx_ = nullptr;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<KvClient> client_;
  uint32_t value_bytes_ = 0;
  unsigned key_bits_ = 64;
  std::string description_;           // table_->describe(), for __repr__ without mu_
  std::atomic<uint32_t> depth_ = 16;  // set_depth() does not wait for a running batch
  std::atomic<bool> open_ = false;    // client_ is set; written under mu_, read without it by the early checks
  int rank_ = 0, size_ = 1;
  std::mutex mu_;  // held by every use of the client, the engine, the fabric and the table
};

}  // namespace

PYBIND11_MODULE(rdmahash, m) {
  m.doc() = "rdmahash: remote-memory hash tables (in-process, or over MPI ranks with UCX). See docs/using.md, Python.";

  static py::exception<std::runtime_error> error(m, "Error", PyExc_RuntimeError);
  g_error = error.ptr();
  // InvalidArgument is both an rdmahash.Error and a ValueError.
  py::object bases = py::make_tuple(py::handle(g_error), py::handle(PyExc_ValueError));
  g_invalid = PyErr_NewExceptionWithDoc("rdmahash.InvalidArgument", "a key, value or option the table cannot take (no request was issued for it)",
                                        bases.ptr(), nullptr);
  m.attr("InvalidArgument") = py::handle(g_invalid);
  g_fabric = PyErr_NewExceptionWithDoc("rdmahash.FabricError", "the transport failed: the operation's outcome is unknown", g_error, nullptr);
  m.attr("FabricError") = py::handle(g_fabric);
  g_retry = PyErr_NewExceptionWithDoc("rdmahash.RetryBudgetExceeded", "a read kept meeting a locked or torn record past its retry budget; it changed nothing",
                                      g_fabric, nullptr);
  m.attr("RetryBudgetExceeded") = py::handle(g_retry);
  g_lost = PyErr_NewExceptionWithDoc("rdmahash.MemoryNodeLost", "a memory node is gone: the table is closed", g_error, nullptr);
  m.attr("MemoryNodeLost") = py::handle(g_lost);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const InvalidArgument& e) {
      PyErr_SetString(g_invalid, e.what());
    } catch (const RetryBudgetExceeded& e) {
      PyErr_SetString(g_retry, e.what());
    } catch (const FabricError& e) {
      PyErr_SetString(g_fabric, e.what());
    } catch (const MemoryNodeLost& e) {
      PyErr_SetString(g_lost, e.what());
    }
  });

  py::enum_<Status>(m, "Status", "What an operation did (rdmahash/table.h); batches return arrays of these values (uint8).")
      .value("FOUND", Status::kFound)
      .value("INSERTED", Status::kInserted)
      .value("FULL", Status::kFull)
      .value("NOT_FOUND", Status::kNotFound)
      .value("UPDATED", Status::kUpdated)
      .value("ERASED", Status::kErased);
  for (auto [name, s] : {std::pair{"FOUND", Status::kFound}, {"INSERTED", Status::kInserted}, {"FULL", Status::kFull},
                         {"NOT_FOUND", Status::kNotFound}, {"UPDATED", Status::kUpdated}, {"ERASED", Status::kErased}})
    m.attr(name) = static_cast<int>(s);

  m.def("schemes", [] {
    std::vector<std::string> v;
    for (const SchemeDescriptor& d : schemes()) v.emplace_back(d.name);
    return v;
  }, "The registered schemes' names (as `rdmahash bench --scheme` spells them).");

  py::class_<Table>(m, "Table", "A table of one scheme; make one with local_table() or mpi_table().")
      .def("find_or_put", [](Table& t, py::handle k, py::handle v) { return t.run(Op::kFindOrPut, k, v); },
           py::arg("keys"), py::arg("values") = py::none(),
           "Insert each key (with its value) unless present; returns statuses (INSERTED, FOUND or FULL).")
      .def("put", [](Table& t, py::handle k, py::handle v) { return t.run(Op::kPut, k, v); }, py::arg("keys"), py::arg("values"),
           "Insert or update; returns statuses (INSERTED, UPDATED or FULL).")
      .def("update", [](Table& t, py::handle k, py::handle v) { return t.run(Op::kUpdate, k, v); }, py::arg("keys"), py::arg("values"),
           "Replace present keys' values; returns statuses (UPDATED or NOT_FOUND).")
      .def("get", [](Table& t, py::handle k) { return t.run(Op::kGet, k, py::none()); }, py::arg("keys"),
           "Look keys up; returns (statuses, values): uint64 keys give a uint8 array of shape (n, value_bytes) "
           "(zeros where NOT_FOUND); byte keys a list of bytes (None where NOT_FOUND).")
      .def("erase", [](Table& t, py::handle k) { return t.run(Op::kErase, k, py::none()); }, py::arg("keys"),
           "Remove keys; returns statuses (ERASED or NOT_FOUND).")
      .def("_native_loop", &Table::native_loop, py::arg("op"), py::arg("keys"), py::arg("batch"),
           "Benchmark aid: run `op` over keys in batches from C++ (no Python per batch); returns seconds.")
      .def("barrier", &Table::barrier, "MPI tables: wait until every rank reaches it, serving this rank's shard meanwhile (use it, not comm.Barrier(), between phases).")
      .def("close", &Table::close, "Release the table (MPI tables: collective; serves the other ranks until every rank has closed).")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](Table& t, py::args) { t.close(); })
      .def_property("depth", &Table::depth, &Table::set_depth, "operations in flight per batch")
      .def_property_readonly("value_bytes", &Table::value_bytes)
      .def_property_readonly("scheme", &Table::scheme)
      .def_property_readonly("byte_keys", &Table::byte_keys)
      .def_property_readonly("rank", &Table::rank)
      .def_property_readonly("size", &Table::size)
      .def_property_readonly("closed", &Table::closed)
      .def("__repr__", [](const Table& t) { return "<rdmahash.Table " + t.describe() + ">"; });

  m.def("local_table", &Table::local, py::arg("scheme") = "linear", py::arg("capacity") = 100000, py::arg("value_bytes") = 8,
        py::arg("load_factor") = 0.5, py::arg("memory_nodes") = 1, py::arg("depth") = 16,
        "An in-process table (LocalFabric): `memory_nodes` regions in this process, one client. "
        "capacity: keys it may hold; other keyword arguments are TableOptions fields (chunk, storage, ...).");
  m.def("connect_table", &Table::connect, py::arg("addresses"), py::arg("token_file") = "", py::arg("depth") = 16,
        "A client of running `rdmahash serve` memory nodes (host:port each, memory node 0 first), as `rdmahash bench "
        "--connect`: the servers' table (scheme, value size, loaded records) is used as they built it.");
  m.def("mpi_table", &Table::mpi, py::arg("comm"), py::arg("scheme") = "linear", py::arg("capacity") = 100000,
        py::arg("value_bytes") = 8, py::arg("load_factor") = 0.5, py::arg("depth") = 16,
        "A table over the ranks of an mpi4py communicator (congruent to MPI.COMM_WORLD), collective: every rank hosts one "
        "shard and runs one client (PGAS; UCX data path). capacity: keys over all ranks. Close it (collective) before MPI ends.");
}
