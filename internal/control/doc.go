// Package control holds the controllers that decide, every tick, how much
// packet delay a shared storage resource's writers get. They are pure and
// deterministic: a signal in, a delay out, no clock, no I/O.
//
// # What is measured
//
// The signal is a resource's read latency: per tick (100 ms) the sum of
// the milliseconds its consumer devices spent on reads completed in the
// tick, divided by the number of those reads (iostat's r_await, weighted
// by requests across the resource's devices), then an EWMA with α = 0.25
// (package smoothing). Reads still in flight that were in flight a tick ago
// count as reads of their age so far: a reader slower than a tick
// completes nothing in most ticks exactly when the disk is worst, and
// reading those ticks as idle released the writers at the worst moment.
// A tick with no read completed and none pending is held (signal and
// delay kept) for up to a second after the last read, then the EWMA
// decays by α toward 0 as in the thesis (engine: "Starvation"). Reads are the
// victims: writes are absorbed by caches and only hurt through the queue
// they build, so read latency is the symptom we control and writers are
// the knob. The 100 ms window is the thesis's sampling period (Listings
// A.2, C.3): short enough to react within a few hundred ms to a
// saturation, long enough to hold several reads of a slow reader (an
// 8 KiB reader at 256 kB/s completes about three per tick).
//
// # Control law (pid)
//
// A single-sided PID in velocity form, in relative terms. With r the set
// point, ε_k = (signal − r)/r the error relative to it, and T the tick:
//
//	Δv = Kp·[(ε_k − ε_{k−1}) + (T/Ti)·ε_k + (Td/T)·(ε_k − 2ε_{k−1} + ε_{k−2})]
//	u_k = clamp(max(u_{k−1}, 0.05·r)·e^Δv, 0, u_max)
//
// The law moves the logarithm of the delay: the error's scale is the
// threshold and the delay's scale is the device (the writers' own I/O
// time, a fraction of a ms on flash, tens of ms on the thesis's array),
// so one set of gains holds 0.2 ms and 50 ms promises alike (see
// PID.Update). A delay falling under 0.05·r is released to 0.
//
// u is the added packet delay in ms. The velocity form computes the change
// of the output, so the clamp on u is the whole anti-windup: no integral
// state exists to pile up while the output is saturated, and the delay
// starts to fall on the first tick the signal is back under the threshold,
// however long it was saturated. "Single-sided" means the controller only
// ever slows writers down; it never speeds anyone up, and whenever the
// clamp brings u to 0 with the signal under the threshold it returns to
// rest and clears its error history, so that a latency climbing from far
// below to just below the threshold (or a stale error of the last
// overload) cannot throttle a healthy resource through the Δe or D terms.
//
// # Actuator and limits
//
// The delay is applied by package throttle to the TCP packets the target
// sends to the resource's throttleable set (consumers writing more than a
// threshold, package policy): to pure ACKs and iSCSI R2T/response PDUs
// when writers are slowed (the default), to data segments when readers
// are. Per-packet delay slows a TCP flow smoothly without drops, so
// nothing is retransmitted; the thesis found a stable relation between
// delay and rate (Figures 5.5, 5.6) and delays of typically 0.5–20 ms
// enough to throttle (§5.7). The delay is clamped to [0, u_max].
//
// # Asymmetry
//
// The law itself is symmetric, but the plant is not: a saturated array's
// latency rises in a few hundred ms and falls as soon as the queue
// drains, while writers slowed by a large delay recover only as TCP
// reopens its window. So the delay should rise promptly on a violation
// and fall steadily, not drop to 0 the moment the EWMA dips under, which
// would let the writers refill the queue at once and oscillate. The
// integral term gives exactly that: below the threshold the delay falls by
// a factor e^(Kp·(T/Ti)·|ε|) per tick, fast when the resource is far under
// the threshold, slowly near it.
//
// # Tuning constants (DefaultParams)
//
//	TargetMs = 15      the thesis's §5.8 resource-wait threshold; the lab's
//	                   reader waits 5–10 ms alone and 30–120 ms under load.
//	Kp = 0.6           (dimensionless) a relative overshoot of 1 (the
//	                   signal at twice the set point) multiplies the
//	                   delay by e^0.6 ≈ 1.8 at once; at the thesis's
//	                   operating point (15 ms, ~7.5 ms of delay) that is
//	                   the former 0.6 ms per ms of error. So
//	                   a violent burst of writers is met within a tick or
//	                   two; found by the simulator's sweep (Kp 0.3–0.8,
//	                   Ti 200–500 ms, Td 0–50 ms, thresholds 10/15/20 ms):
//	                   lowest worst-case p95/threshold, while higher Kp
//	                   cost write throughput for no gain (sim.SimGains).
//	Ti = 500 ms        five ticks: the integral moves the delay by e^(Kp·ε)
//	                   per 0.5 s, which
//	                   removes the steady-state error of P alone without
//	                   racing the EWMA's ~0.35 s lag into oscillation.
//	Td = 50 ms         Td/T = 0.5: a small D term damps the overshoot the
//	                   EWMA's lag causes; larger amplifies the per-tick
//	                   noise of a mean over a few reads.
//	T = 100 ms         the tick; must match the loop, it scales Ti and Td.
//	u_max = 20 ms      the ceiling the delay starts with: the top of the
//	                   thesis's range (§4.4: 21 steps of 0.5 ms up to
//	                   20 ms; §5.7: typically 0.5–20 ms). The engine
//	                   raises it ×1.5 per second (per 0.3 s at twice the
//	                   threshold) while the delay sits at it over the
//	                   threshold, up to u_max_limit (200 ms):
//	                   a per-I/O delay cuts a writer's rate only as far as
//	                   its concurrency allows, so many threads or deep
//	                   queues need more (engine: "Authority").
//	ErrCap = 3         the error is capped at 3 × the set point: beyond,
//	                   a latency says "more delay" but not how much, and
//	                   the P term of a falling spike (320 → 272 ms at
//	                   15 ms, a recorded lab trace) took the delay from
//	                   u_max to 0 while the latency was 18 × over.
//	EWMA α = 0.25      the thesis's filter weight (package smoothing).
//
// The simulator tunes these against the disk model; change them through
// Params, never here alone.
//
// # Other controllers
//
// "thesis" is a deliberate copy of the buggy arithmetic of thesis Listing
// A.2 (see Thesis), kept to compare with pid on the same run. "none"
// always returns 0 and is the baseline.
//
// # Monitoring
//
// The engine reports per resource and tick: the raw latency, the filtered
// signal, the threshold, the delay and the throttleable set, e.g. as the
// daemon logs and exports them:
//
//	resource=vg-data raw_ms=41.2 signal_ms=33.9 threshold_ms=15 delay_ms=3.78 members=10.0.0.3,10.0.0.4
//
// A resource at rest shows delay_ms=0 and no members; delay_ms pinned at
// u_max_limit for long is reported as saturation (a warning, the
// sanqos_resource_saturated metric, SATURATED in sanqos status): the
// resource cannot be brought under its threshold by delaying its writers
// (the threshold is too low, the load is reads, or the writers need a
// rate limit).
package control
