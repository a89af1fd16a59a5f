#include <rdmahash/client.h>
#include <cstdio>
int main() {
  rdmahash::LinearConfig cfg;
  auto fabric = rdmahash::make_local_fabric({cfg.region_bytes()});
  rdmahash::LinearShardLoader(cfg, 0, fabric->local_region(0));
  rdmahash::Client c(*fabric, cfg);
  auto a = c.find_or_put(42), b = c.find_or_put(42);
  std::printf("%s %s\n", rdmahash::to_string(a.status), rdmahash::to_string(b.status));
  return !(a.status == rdmahash::Status::kInserted && b.status == rdmahash::Status::kFound);
}
