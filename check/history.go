package main

// Reading rdmahash history files (format: src/check/history.h).

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
)

const (
	headerBytes = 32
	eventBytes  = 48
	maxEvents   = 1 << 24
	initClient  = 0xFFFFFFFF
	statusError = 0xFF
)

// Operations (check::HistOp).
const (
	opInit uint8 = iota
	opGet
	opPut
	opUpdate
	opErase
	opFindOrPut
)

// Statuses (rdmahash::Status).
const (
	stFound uint8 = iota
	stInserted
	stFull
	stNotFound
	stUpdated
	stErased
)

var opNames = []string{"init", "get", "put", "update", "erase", "find_or_put"}
var statusNames = []string{"found", "inserted", "full", "not_found", "updated", "erased"}

func statusName(s uint8) string {
	if s == statusError {
		return "error(outcome unknown)"
	}
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("status(%d)", s)
}

// Event is one recorded operation.
type Event struct {
	Invoke, Response uint64
	Key              uint64
	Written, Read    uint64
	Client           uint32
	Op, Status       uint8
}

// validStatus: the statuses each operation can answer (plus statusError for every op but init).
func validStatus(op, st uint8) bool {
	if st == statusError {
		return op != opInit
	}
	switch op {
	case opInit:
		return st == stInserted || st == stNotFound
	case opGet:
		return st == stFound || st == stNotFound
	case opPut:
		return st == stInserted || st == stUpdated || st == stFull
	case opUpdate:
		return st == stUpdated || st == stNotFound
	case opErase:
		return st == stErased || st == stNotFound
	case opFindOrPut:
		return st == stFound || st == stInserted || st == stFull
	}
	return false
}

// readHistory reads and validates a history file; errors name the file and what is wrong.
// open: the recording was not finished (its client died); unused capacity may follow the events.
func readHistory(path string) (events []Event, open bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false, fmt.Errorf("cannot open history file '%s': %v", path, err)
	}
	defer f.Close()
	var hdr [headerBytes]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil || string(hdr[0:8]) != "RDMAHIS1" {
		return nil, false, fmt.Errorf("%s: not an rdmahash history file (bad header)", path)
	}
	version := binary.LittleEndian.Uint32(hdr[8:])
	size := binary.LittleEndian.Uint32(hdr[12:])
	count := binary.LittleEndian.Uint64(hdr[16:])
	openFlag := binary.LittleEndian.Uint64(hdr[24:])
	if openFlag > 1 {
		return nil, false, fmt.Errorf("%s: bad header (open flag %d)", path, openFlag)
	}
	open = openFlag == 1
	if version != 1 || size != eventBytes {
		return nil, false, fmt.Errorf("%s: unsupported history version %d (event size %d)", path, version, size)
	}
	if count > maxEvents {
		return nil, false, fmt.Errorf("%s: event count %d exceeds the bound %d", path, count, maxEvents)
	}
	buf := make([]byte, count*eventBytes)
	if _, err := io.ReadFull(f, buf); err != nil {
		return nil, false, fmt.Errorf("%s: truncated (header says %d events)", path, count)
	}
	var extra [1]byte
	if n, _ := f.Read(extra[:]); n != 0 && !open {
		return nil, false, fmt.Errorf("%s: trailing bytes after the %d events", path, count)
	}
	events = make([]Event, count)
	for i := range events {
		b := buf[i*eventBytes:]
		e := Event{
			Invoke:   binary.LittleEndian.Uint64(b[0:]),
			Response: binary.LittleEndian.Uint64(b[8:]),
			Key:      binary.LittleEndian.Uint64(b[16:]),
			Written:  binary.LittleEndian.Uint64(b[24:]),
			Read:     binary.LittleEndian.Uint64(b[32:]),
			Client:   binary.LittleEndian.Uint32(b[40:]),
			Op:       b[44],
			Status:   b[45],
		}
		if e.Op > opFindOrPut {
			return nil, false, fmt.Errorf("%s: event %d: unknown operation %d", path, i, e.Op)
		}
		if !validStatus(e.Op, e.Status) {
			return nil, false, fmt.Errorf("%s: event %d: %s cannot answer %s", path, i, opNames[e.Op], statusName(e.Status))
		}
		if (e.Op == opInit) != (e.Client == initClient) {
			return nil, false, fmt.Errorf("%s: event %d: init events (and only they) belong to client 0x%x", path, i, uint32(initClient))
		}
		if e.Op == opInit && (e.Invoke != 0 || e.Response != 0) {
			return nil, false, fmt.Errorf("%s: event %d: init events have times 0", path, i)
		}
		if e.Op != opInit && (e.Invoke == 0 || e.Response < e.Invoke) {
			return nil, false, fmt.Errorf("%s: event %d: response time %d before invocation time %d", path, i, e.Response, e.Invoke)
		}
		events[i] = e
	}
	return events, open, nil
}
