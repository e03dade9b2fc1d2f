package unwind

import "testing"

func TestEpilogueRule(t *testing.T) {
	tests := []struct {
		name string
		code []byte
		want Rule
		ok   bool
	}{
		{"CPython's perf trampoline after its call: add $8, %rsp; ret",
			[]byte{0x48, 0x83, 0xc4, 0x08, 0xc3, 0x48, 0x83, 0xec}, Rule{Kind: SPOffset, Offset: 16}, true},
		{"at its ret", []byte{0xc3}, Rule{Kind: SPOffset, Offset: 8}, true},
		{"pop %rbp; ret", []byte{0x5d, 0xc3}, Rule{Kind: SPOffset, Offset: 16, FP: FPAtCFA, FPOffset: -16}, true},
		{"add $0x28, %rsp; pop %rbx; pop %rbp; pop %r12; ret",
			[]byte{0x48, 0x83, 0xc4, 0x28, 0x5b, 0x5d, 0x41, 0x5c, 0xc3}, Rule{Kind: SPOffset, Offset: 0x28 + 32, FP: FPAtCFA, FPOffset: 0x30 - 0x48}, true},
		{"add $0x148, %rsp; ret", []byte{0x48, 0x81, 0xc4, 0x48, 0x01, 0, 0, 0xc3}, Rule{Kind: SPOffset, Offset: 0x150}, true},
		{"leave; ret", []byte{0xc9, 0xc3}, Rule{Kind: FPOffset, Offset: 16, FP: FPAtCFA, FPOffset: -16}, true},
		{"the trampoline's first instruction: sub, then a call", []byte{0x48, 0x83, 0xec, 0x08, 0xff, 0xd1}, Rule{}, false},
		{"a branch before the ret", []byte{0x74, 0x02, 0xc3}, Rule{}, false},
		{"a move before the ret", []byte{0x48, 0x89, 0xc3, 0xc3}, Rule{}, false},
		{"add of a negative number", []byte{0x48, 0x83, 0xc4, 0xf8, 0xc3}, Rule{}, false},
		{"cut before the ret", []byte{0x48, 0x83, 0xc4, 0x08}, Rule{}, false},
		{"empty", nil, Rule{}, false},
	}
	for _, tt := range tests {
		got, ok := EpilogueRule(tt.code)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: EpilogueRule = %+v, %v; want %+v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}
