package main

// The per-key model: a register that is absent or holds one value (named by its 64-bit digest).

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

type kvState struct {
	present bool
	digest  uint64
}

type kvInput struct {
	op      uint8
	written uint64
}

type kvOutput struct {
	status uint8
	read   uint64
}

var absent = kvState{}

// step: may the operation (in → out) take the key from s, and to which state?
func step(s kvState, in kvInput, out kvOutput) (bool, kvState) {
	put := kvState{true, in.written}
	if out.status == statusError {
		// Outcome unknown: the operation never returned (its response time is +inf), so it may be
		// linearized at any point after its invocation — including after everything, where its
		// effect is invisible. Applying the effect here is therefore enough.
		switch in.op {
		case opPut:
			return true, put
		case opUpdate:
			if s.present {
				return true, put
			}
		case opErase:
			return true, absent
		case opFindOrPut:
			if !s.present {
				return true, put
			}
		}
		return true, s
	}
	switch in.op {
	case opInit:
		if out.status == stInserted {
			return true, put
		}
		return true, absent
	case opGet:
		if out.status == stFound {
			return s.present && s.digest == out.read, s
		}
		return !s.present, s
	case opPut:
		switch out.status {
		case stInserted:
			return !s.present, put
		case stUpdated:
			return s.present, put
		}
		return !s.present, s // full: no room to insert an absent key
	case opUpdate:
		if out.status == stUpdated {
			return s.present, put
		}
		return !s.present, s
	case opErase:
		if out.status == stErased {
			return s.present, absent
		}
		return !s.present, s
	case opFindOrPut:
		switch out.status {
		case stFound:
			return s.present, s
		case stInserted:
			return !s.present, put
		}
		return !s.present, s // full
	}
	return false, s
}

func describeValue(d uint64) string {
	if d == 0 {
		return "·"
	}
	return fmt.Sprintf("#%04x", d&0xFFFF)
}

var kvModel = porcupine.Model{
	Init: func() interface{} { return absent },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		return step(state.(kvState), input.(kvInput), output.(kvOutput))
	},
	Equal: func(a, b interface{}) bool { return a.(kvState) == b.(kvState) },
	Hash: func(s interface{}) uint64 {
		st := s.(kvState)
		if !st.present {
			return 0
		}
		return st.digest*0x9E3779B97F4A7C15 + 1
	},
	DescribeOperation: func(input, output interface{}) string {
		return describeOp(input.(kvInput), output.(kvOutput))
	},
	DescribeState: func(s interface{}) string {
		st := s.(kvState)
		if !st.present {
			return "absent"
		}
		return "present " + describeValue(st.digest)
	},
}

func describeOp(in kvInput, out kvOutput) string {
	arg := ""
	if in.op == opPut || in.op == opUpdate || in.op == opFindOrPut || in.op == opInit {
		arg = describeValue(in.written)
	}
	res := statusName(out.status)
	if in.op == opGet && out.status == stFound {
		res += " " + describeValue(out.read)
	}
	if in.op == opInit {
		if out.status == stNotFound {
			return "init → absent"
		}
		return "init → " + arg
	}
	return fmt.Sprintf("%s(%s) → %s", opNames[in.op], arg, res)
}
