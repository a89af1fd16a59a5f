// The benchmark driver: builds the table, runs every point of the sweep, reports.
//
// Sweep order: for each load factor the table is built afresh (bulk load on the memory nodes);
// then each workload runs in the order given, on the same table (a find-or-put point leaves its
// inserts in the table for the points after it). `get` runs once per --read-size, `raw-read`
// once per --read-bytes. Every point is measured between two barriers over all clients.
#pragma once

#include <cstdio>

#include "bench/options.h"

namespace rdmahash::bench {

// In-process run (`--fabric local`): memory nodes and client threads in this process.
// Returns the process exit status. Throws InvalidArgument for bad options.
int run_local(const BenchOptions& o);

// UCX run (`--fabric ucx`): call on every MPI rank after MPI_Init. Returns the exit status.
// Throws InvalidArgument only for errors every rank detects alike (before any communication);
// any other exception may be one rank's alone, and the caller must abort the job.
int run_ucx(const BenchOptions& o);

}  // namespace rdmahash::bench
