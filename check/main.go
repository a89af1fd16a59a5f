// rdmahash-check-history: checks that an rdmahash operation history is linearizable, with
// Porcupine and a per-key key-value model (each key is an independent register: absent, or
// present with a value named by its digest). Run through `rdmahash check-history FILE`.
//
// Exit status: 0 linearizable, 1 not linearizable (the first violating key and its operations are
// printed, and Porcupine's HTML visualization of that key is written), 2 bad arguments or a bad
// history file, 3 unknown (a key's check exceeded -timeout-per-key; no violation was found).
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"sort"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

const prog = "rdmahash check-history"

func fail(code int, format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, prog+": error: "+format+"\n", args...)
	os.Exit(code)
}

type keyHistory struct {
	key uint64
	ops []porcupine.Operation
}

// partition: the operations of each key, in key order of first appearance in the file. Times are
// made relative to the earliest invocation (+1, so that init events at 0 precede every operation);
// an operation whose outcome is unknown never returned (response +inf).
func partition(events []Event) ([]keyHistory, int) {
	var t0 uint64 = math.MaxUint64
	for _, e := range events {
		if e.Op != opInit && e.Invoke < t0 {
			t0 = e.Invoke
		}
	}
	clients := map[uint32]int{}
	var ids []uint32
	for _, e := range events {
		if _, ok := clients[e.Client]; !ok && e.Op != opInit {
			clients[e.Client] = 0
			ids = append(ids, e.Client)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for i, c := range ids {
		clients[c] = i + 1 // lane 0: the initial state
	}
	index := map[uint64]int{}
	var keys []keyHistory
	for _, e := range events {
		i, ok := index[e.Key]
		if !ok {
			i = len(keys)
			index[e.Key] = i
			keys = append(keys, keyHistory{key: e.Key})
		}
		op := porcupine.Operation{
			ClientId: clients[e.Client],
			Input:    kvInput{e.Op, e.Written},
			Output:   kvOutput{e.Status, e.Read},
		}
		if e.Op != opInit {
			op.Call = int64(e.Invoke-t0) + 1
			op.Return = int64(e.Response-t0) + 1
			if e.Status == statusError {
				op.Return = math.MaxInt64
			}
		}
		keys[i].ops = append(keys[i].ops, op)
	}
	return keys, len(ids)
}

func describe(op porcupine.Operation) string {
	in, out := op.Input.(kvInput), op.Output.(kvOutput)
	if in.op == opInit {
		return describeOp(in, out)
	}
	ret := "never returned"
	if op.Return != math.MaxInt64 {
		ret = fmt.Sprintf("%.3f us", float64(op.Return)/1e3)
	}
	return fmt.Sprintf("client %d: %s  [%.3f us .. %s]", op.ClientId-1, describeOp(in, out), float64(op.Call)/1e3, ret)
}

// explain prints the operations involved in a violation: the longest linearizable prefix Porcupine
// found (its last steps), and the first operation it could not extend it with together with every
// operation concurrent with that one.
func explain(k keyHistory, info porcupine.LinearizationInfo) {
	partials := info.PartialLinearizationsOperations()
	var best []porcupine.Operation
	for _, p := range partials {
		for _, l := range p {
			if len(l) > len(best) {
				best = l
			}
		}
	}
	done := map[porcupine.Operation]bool{}
	for _, op := range best {
		done[op] = true
	}
	var stuck *porcupine.Operation
	for i := range k.ops {
		op := &k.ops[i]
		if !done[*op] && (stuck == nil || op.Return < stuck.Return) {
			stuck = op
		}
	}
	s := absent
	var states []kvState
	for _, op := range best {
		_, s = step(s, op.Input.(kvInput), op.Output.(kvOutput))
		states = append(states, s)
	}
	fmt.Printf("longest linearizable prefix: %d of %d operations; its last steps:\n", len(best), len(k.ops))
	from := len(best) - 5
	if from < 0 {
		from = 0
	}
	for i := from; i < len(best); i++ {
		fmt.Printf("  %s   => %s\n", describe(best[i]), kvModel.DescribeState(states[i]))
	}
	if stuck == nil {
		return
	}
	fmt.Printf("no linearization point for:\n  %s\nconcurrent with it:\n", describe(*stuck))
	for _, op := range k.ops {
		if op != *stuck && op.Call <= stuck.Return && stuck.Call <= op.Return && op.Input.(kvInput).op != opInit {
			fmt.Printf("  %s\n", describe(op))
		}
	}
}

func main() {
	timeout := flag.Duration("timeout-per-key", 60*time.Second, "give up on a key after this long (result: unknown)")
	html := flag.String("html", "", "where to write the visualization of a violating key (default: FILE.html)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: %s [-timeout-per-key D] [-html OUT] FILE...\n", prog)
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() < 1 {
		flag.Usage()
		os.Exit(2)
	}
	if *timeout <= 0 {
		fail(2, "-timeout-per-key must be positive")
	}
	path := flag.Arg(0)
	start := time.Now()
	events, err := mergeHistories(flag.Args())
	if err != nil {
		fail(2, "%v", err)
	}
	keys, clients := partition(events)

	results := make([]porcupine.CheckResult, len(keys))
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < runtime.NumCPU(); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				results[i] = porcupine.CheckOperationsTimeout(kvModel, keys[i].ops, *timeout)
			}
		}()
	}
	for i := range keys {
		next <- i
	}
	close(next)
	wg.Wait()

	unknown := 0
	for i, r := range results {
		if r == porcupine.Illegal {
			k := keys[i]
			fmt.Printf("not linearizable: key %d (0x%x), %d operations of %d clients\n", k.key, k.key, len(k.ops)-1, clients)
			_, info := porcupine.CheckOperationsVerbose(kvModel, k.ops, *timeout)
			explain(k, info)
			out := *html
			if out == "" {
				out = path + ".html"
			}
			if err := porcupine.VisualizePath(kvModel, info, out); err != nil {
				fmt.Fprintf(os.Stderr, "%s: warning: cannot write the visualization: %v\n", prog, err)
			} else {
				fmt.Printf("visualization: %s\n", out)
			}
			os.Exit(1)
		}
		if r == porcupine.Unknown {
			unknown++
		}
	}
	secs := time.Since(start).Seconds()
	if unknown > 0 {
		fmt.Printf("unknown: %d of %d keys not decided within %v each (no violation found in the others); %d events, %.2f s\n",
			unknown, len(keys), *timeout, len(events), secs)
		os.Exit(3)
	}
	fmt.Printf("linearizable: %d events, %d keys, %d clients, checked in %.2f s\n", len(events), len(keys), clients, secs)
}

// mergeHistories reads one table's life from one or more files (one per `bench --connect` client,
// or one for a whole run): every file must start from the same initial state (its init events),
// and no client may appear in two files. A file whose recording was not finished (its client was
// killed) is announced; its operations in flight are pending (outcome unknown) by construction.
func mergeHistories(paths []string) ([]Event, error) {
	var all []Event
	var init []Event
	owner := map[uint32]string{}
	for i, path := range paths {
		events, open, err := readHistory(path)
		if err != nil {
			return nil, err
		}
		if open {
			fmt.Printf("%s: recording not finished (its client died); operations in flight are pending\n", path)
		}
		var mine []Event
		for _, e := range events {
			if e.Op == opInit {
				mine = append(mine, e)
			}
		}
		if i == 0 {
			init = mine
			all = append(all, mine...)
		} else if !sameInit(init, mine) {
			return nil, fmt.Errorf("%s and %s start from different initial states: they are not one table's history", paths[0], path)
		}
		seen := map[uint32]bool{}
		for _, e := range events {
			if e.Op == opInit {
				continue
			}
			if !seen[e.Client] {
				seen[e.Client] = true
				if other, ok := owner[e.Client]; ok {
					return nil, fmt.Errorf("client %d appears in %s and in %s", e.Client, other, path)
				}
				owner[e.Client] = path
			}
			all = append(all, e)
		}
	}
	return all, nil
}

func sameInit(a, b []Event) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[uint64]Event{}
	for _, e := range a {
		m[e.Key] = e
	}
	for _, e := range b {
		x, ok := m[e.Key]
		if !ok || x.Status != e.Status || x.Written != e.Written {
			return false
		}
	}
	return true
}
