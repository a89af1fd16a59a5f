// The registry's private side: each scheme's folder defines its check and its table factory;
// registry.cpp lists them (one entry a scheme). See rdmahash/scheme.h.
#pragma once

#include <memory>
#include <string>

#include "rdmahash/scheme.h"

namespace rdmahash::scheme_impl {

std::string check_linear(const TableOptions& o);
std::unique_ptr<SchemeTable> make_linear(const TableOptions& o);
std::string check_cuckoo(const TableOptions& o);
std::unique_ptr<SchemeTable> make_cuckoo(const TableOptions& o);
std::string check_race(const TableOptions& o);
std::unique_ptr<SchemeTable> make_race(const TableOptions& o);
std::string check_continuity(const TableOptions& o);
std::unique_ptr<SchemeTable> make_continuity(const TableOptions& o);
std::string check_level(const TableOptions& o);
std::unique_ptr<SchemeTable> make_level(const TableOptions& o);
std::string check_hopscotch(const TableOptions& o);
std::unique_ptr<SchemeTable> make_hopscotch(const TableOptions& o);
std::string check_cluster(const TableOptions& o);
std::unique_ptr<SchemeTable> make_cluster(const TableOptions& o);

}  // namespace rdmahash::scheme_impl
