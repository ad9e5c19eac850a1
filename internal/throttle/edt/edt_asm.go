//go:build linux

package edt

// The classifier as it was before bpf/edt.bpf.c, hand-assembled: IPv4
// only, keyed by the 4-byte address, no counters. It stays until the C
// program has passed the kernel lab's edt suite; nothing loads it but
// its tests.

import "github.com/cilium/ebpf/asm"

// skbTstamp is the offset of tstamp in struct __sk_buff.
const skbTstamp = 152

// program returns the classifier. Registers: r6 skb, r7 map value, r8 now,
// r9 departure time.
func program(mapFD int) asm.Instructions {
	return asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		// IPv4 only: skb->protocol is htons(ETH_P_IP).
		asm.LoadMem(asm.R0, asm.R6, 16, asm.Word),
		asm.JNE.Imm(asm.R0, 0x0008, "pass"),
		// Copy the 20-byte IPv4 header (after Ethernet) to fp-24.
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Imm(asm.R2, 14),
		asm.Mov.Reg(asm.R3, asm.R10),
		asm.Add.Imm(asm.R3, -24),
		asm.Mov.Imm(asm.R4, 20),
		asm.FnSkbLoadBytes.Call(),
		asm.JNE.Imm(asm.R0, 0, "pass"),
		// Look the destination address (header offset 16) up.
		asm.LoadMapPtr(asm.R1, mapFD),
		asm.Mov.Reg(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, -8),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.Mov.Reg(asm.R7, asm.R0),
		// Only packets whose total length is in the entry's range.
		asm.LoadMem(asm.R0, asm.R10, -22, asm.Half),
		asm.HostTo(asm.BE, asm.R0, asm.Half),
		asm.LoadMem(asm.R1, asm.R7, offMinLen, asm.DWord),
		asm.JLT.Reg(asm.R0, asm.R1, "pass"),
		asm.LoadMem(asm.R1, asm.R7, offMaxLen, asm.DWord),
		asm.JGT.Reg(asm.R0, asm.R1, "pass"),
		asm.FnKtimeGetNs.Call(),
		asm.Mov.Reg(asm.R8, asm.R0),
		// Fail open: an entry the daemon stopped renewing is ignored.
		asm.LoadMem(asm.R1, asm.R7, offExpires, asm.DWord),
		asm.JLT.Reg(asm.R1, asm.R8, "pass"),
		asm.LoadMem(asm.R9, asm.R7, offDelay, asm.DWord),
		asm.Add.Reg(asm.R9, asm.R8),
		// Keep order: never before the last departure time given.
		asm.LoadMem(asm.R1, asm.R7, offLast, asm.DWord),
		asm.JGE.Reg(asm.R9, asm.R1, "store"),
		asm.Mov.Reg(asm.R9, asm.R1),
		asm.StoreMem(asm.R7, offLast, asm.R9, asm.DWord).WithSymbol("store"),
		asm.StoreMem(asm.R6, skbTstamp, asm.R9, asm.DWord),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("pass"), // TC_ACT_OK
		asm.Return(),
	}
}
