// Package control holds sanqos's control law. Per shared storage resource
// and per tick, a Loop takes what the engine measured (an Observation)
// and returns the packet delay for the resource's writers and its
// ceiling (an Output), running every rule below in this order
// (Loop.Step). The loop is pure and deterministic: no clock, no I/O.
// The evidence behind the rules is in docs/results.md, and what each rule
// is worth, the law run with it off, in docs/ablation.md; this comment
// says what each rule does and why.
//
// # What is measured
//
// Reads are the victims: writes are absorbed by caches and hurt only
// through the queue they build, so the read latency of a resource is
// the symptom controlled and its writers are the knob. Every tick (T =
// 100 ms, the thesis's sampling period: a few hundred ms to react, and
// several reads of a slow reader per window) the engine takes, over the
// resource's devices whose reads count (package policy), the reads that
// completed in the tick:
//
//   - from the block-layer probe (internal/observe/blkprobe) where it is trusted
//     for the device (it has counted reads there and never none while
//     /proc/diskstats counted some: bio-based devices are invisible to
//     it), in microseconds with their histogram;
//   - else from /proc/diskstats: Σ read ms / Σ reads (iostat's r_await,
//     weighted by requests across the devices).
//
// The raw value is the statistic the resource's signal names: the mean
// (SignalMean, the thesis's), or the tick's p95 or p99 where the probe
// measured every device (otherwise the mean, and the decision says so).
// Reads in flight count too, because a reader slower than a tick
// completes nothing exactly when the disk is worst: the probe's oldest
// read counts by its age when nothing completed or it is older than the
// tick's slowest (and only when the kernel counts as many reads in flight
// as the probe holds: a slot the probe failed to free ages until its
// request is reused, and must not throttle anyone); without
// the probe, reads in flight that were already in flight a tick ago
// count by their age since (a lower bound). A count older than 30 s
// (past the SCSI command timeout) is an accounting leak and is ignored.
// The engine reads no device itself: /proc/diskstats, the probe's tick
// and the reads in flight (sysfs) are sampled by the daemon before the
// engine's step, which decides on that one sample.
//
// The engine also tells the loop the size of the throttleable set
// (members: consumers whose write-rate EWMA is over the join threshold,
// package policy), whether a member wrote in the tick (writes completed
// or I/O at its device), and the rate the resource's devices completed
// writes at in the tick and their mean time at the devices
// (/proc/diskstats), which say whether a delay, not the device, holds
// the writers (step 6).
//
// # The law, step by step
//
// 1. Signal. An EWMA of the raw value, α = 0.25 (the thesis's weight; its
// lag is about 0.35 s). A tick with no value (no read completed, none
// counted by its age) is held, signal and delay kept ("Held" in the
// output), for DefaultIdleHold (1 s) after the last read: a reader of a
// few reads a second leaves most ticks empty, and the delay must be
// neither released between two reads nor kept on stale news once the
// readers have gone. Otherwise the resource is idle and the EWMA decays
// toward 0, as in the thesis.
//
// 2. Armed through pauses. While the set is empty, or (writers found by
// their writes: the read-over-write policy) none of its members writes,
// the delay acts on nobody, and the reader's latency says nothing about
// the delay the writers need. The controller is then not stepped
// ("Armed") and keeps its output, for up to ArmHold (2 min) once the set
// is empty: writers that come back meet the delay they left instead of a
// ramp from 0 that lets their first second through. The delay a set
// that empties keeps is at least the median of the controller's output
// over the last heldTicks (100, 10 s) running ticks with members writing:
// in a burst's last seconds the reads get fast while the writers still
// write and the delay winds down (NFS writers whose data the server has
// written out), and the next burst's onset needs what the burst needed,
// not its tail, even where the tail wound the delay to 0. Past ArmHold the controller runs again and, the resource
// being healthy, winds down. ArmHold is long enough for writers that
// come back every minute or so (a database's checkpoints), whose bursts
// otherwise each began from rest. Where the resource no longer needs
// the delay, holding costs a returning writer its first second at the
// old delay (the data path's arming) and the seconds the controller,
// stepped again, takes to release it.
//
// 3. The controller (pid), stepped when the signal had news and the loop
// is not armed. A single-sided PID in velocity form on the logarithm of
// the delay, driven by the error relative to the set point r:
//
//	ε_k = min((signal − r)/r, ErrCap)
//	Δv  = Kp·[(ε_k − ε_{k−1}) + (T/Ti)·ε_k + (Td/T)·(ε_k − 2ε_{k−1} + ε_{k−2})]
//	u_k = clamp(max(u_{k−1}, FloorShare·r)·e^Δv, 0, ceiling)
//
// Relative both ways: the error's scale is the threshold (1 ms over is
// nothing at 50 ms and everything at 0.5 ms) and the delay's is the
// device (a writer's I/O time, a fraction of a ms on flash, tens of ms
// on a disk array), so one set of gains holds 0.2 ms and 50 ms promises.
// The clamp is the whole anti-windup: the velocity form has no integral
// to pile up, and the delay falls on the first tick under the set point.
//
//   - Error cap (ErrCap, DefaultErrCap = 3): a latency many times over
//     the set point says "more delay", not how much; uncapped, the P
//     term of a falling spike undid the whole delay while the latency
//     was still far over. A rebase takes the error history capped the
//     same way.
//   - Floor (FloorShare = 0.05 of r): a law acting by factors needs a
//     starting point above 0, under what any writers need; a delay
//     falling under it is released to 0. Without the release a delay
//     once set never comes back to 0 while the writers write: a healthy
//     resource would keep them held.
//   - Rest: at 0 with the signal under the set point the error history
//     is cleared, so how far under a healthy resource is, or a stale error
//     of the last overload, cannot throttle it through the Δε or D terms.
//   - First climb: from rest until the signal first comes down to the set
//     point, a falling error takes nothing away (Δε and D count only
//     when they add): as the delay drains a burst's backlog the signal
//     falls from far over to just over, and that fall is not an overshoot.
//     For the same reason the error is not capped after the tick that
//     leaves rest: a burst far over takes the delay to its ceiling in a
//     tick or two instead of climbing at the cap's pace (e^(Kp·(T/Ti)·
//     ErrCap), 1.43 a tick), which left writers 64 deep on a capped
//     volume a second more to fill it. The tick that leaves rest is
//     capped: it may be one noisy tick.
//   - Relapse: an overload (the signal crossing relapseOnset, 2 × the
//     set point) was let in by the delay in force when the signal was
//     last at or under the set point. For relapseHold (1 min of the
//     controller's ticks: a pause does not count) a delay falling under
//     relapseMargin (1.5) × that delay falls by at most a factor
//     2^(−T/relapseHalfLife) a tick (a half-life of 35 s). Integral
//     action walks a healthy loop's delay down until the latency
//     answers; where the latency is a cliff rather than a slope (a volume
//     behind IOPS and throughput caps, whose reads are fast while its
//     bucket has tokens and many times the threshold once the writers
//     empty it: no delay puts them at the set point), each walk down
//     costs a bad second and the answer kicks the delay up again (the
//     simulator's capped volume: 14 ↔ 45 ms every half second, where a
//     fixed 20 ms holds). An onset while the guard holds, or within a
//     hold of its end, doubles the hold, up to relapseHoldMax (4 min):
//     a cliff found again as soon as the guard lets go is the plant's,
//     not one overload's, and each return to it costs a bad second or
//     two (the lab's capped volume, a minute after the first onset). An
//     overload from rest remembers nothing, and rest forgets.
//   - Recall: the delay a burst needed, the median that arms its pause
//     (step 2), is remembered for RecallWindow (30 min). A climb from
//     rest within that time starts at it, once, instead of at the
//     floor: writers that come back after more than ArmHold (a
//     checkpoint every few minutes, a job every quarter of an hour)
//     would otherwise meet no delay and let a backlog in for the second
//     or two the climb takes, and every tick counts (waiting for the
//     signal at twice the set point, a tick or two later, left two thirds
//     more of the seconds over). A recalled delay that is more than the
//     writers now need (a tick over the set point that was noise, or
//     lighter writers) costs them the seconds the controller takes to
//     wind it down: the signal is under the set point and the delay
//     falls as usual (the simulator's TestRecallPriceOnLighterWriters
//     bounds that price).
//   - Rebase: a controller stepped again after a pause takes the signal
//     as its error history, so the pause's change of error is no kick.
//
// 4. The ceiling. A per-packet delay cuts a writer's rate only as far as
// its concurrency allows, so many threads or deep queues need more than
// the thesis's 20 ms. The ceiling starts at UMaxMs (20 ms) and, while the
// delay presses on it (within pressShare = 0.85 of it: the P and D terms
// keep the output a few percent under the clamp from tick to tick) with
// the signal over the set point and members in the set, rises by
// raiseFactor (1.5: by factors, so TCP's RTT estimate keeps ahead) after
// raiseAfter (1 s), or raiseAfterFar (0.3 s) with the signal farOver (2)
// × the threshold or more: a burst's backlog drains only with more than
// the steady need, soon. It rises up to UMaxLimitMs (DefaultUMaxLimitMs
// = 200 ms: under Linux's 200 ms minimum retransmission timeout plus the
// RTT the writers measure, and far under the 30 s SCSI command timeout)
// and falls by the same factor
// after lowerAfter (10 s) with the delay under half of it. Saturated: the
// delay has pressed on the ceiling at its limit for raiseAfter with the
// signal still over: packet delay alone is not holding these writers.
//
// 5. Headroom. The set point is the threshold less a headroom: the
// promise is about single seconds, the controller holds the mean, and a
// mean held at the threshold leaves half the seconds over it.
// DefaultHeadroom (0.15) holds a second's p95 near the threshold for a
// scatter of up to about 10 %; where seconds scatter more (NFS: 0.25) it
// is configured wider. A headroom measured per resource from the scatter
// of its seconds ("auto") was removed: the ablation found no case it
// improved (docs/ablation.md).
//
// 6. Gain. A delay is worth its cost to the writers only where it buys
// read latency, and on a device that is not the readers' bottleneck (a
// fast disk whose readers wait for the target's CPU or the network) the
// controller, seeing the signal over the set point, adds delay for
// nothing: on the lab's ssd profile at T = 1.16 ms it made the reader
// slower and took 28 % of the writers' rate. The plant's gain cannot be
// read off the record passively (in closed loop the delay is high when
// the latency is, whatever the plant does), so the loop asks the plant.
//
// Comparable ticks are running ticks with members writing, as many as
// before (another count clears the record and ends a probe without a
// verdict; a pause neither counts nor breaks it: on flash a burst may
// last 2 s). The loop keeps the last gainWindow (10) comparable ticks
// with reads, and counts its losing ticks (delay in force, signal over
// the set point), less gainLosingWeight (3) for each tick under it, so a
// loop that holds its set point never suspects its delay and a burst's
// onset does not clear the count. At most every gainProbeEvery (30 s) it
// probes (gainReleasing, from gainWatching) a loop that has been losing
// for gainSuspectAfter (6 s: longer than a deep queue's onset, which
// loses for 2–4 s while the ceiling rises), or sooner once the delay has
// reached the writers and bought nothing: the devices' write
// completions, over the window and the one before it, under
// gainTookEffect (0.25) of the losing streak's peak without the devices
// holding the writes longer than with the writers free (the streak's
// ticks at half the peak or more; longer by gainMinBenefit of their
// reads: a write-back cache that fills slows the writers by itself), and
// the window's reads no faster by gainMinBenefit than those of the free
// ticks. That is evidence elapsed time is not: at a deep queue's onset
// the device completes writes at its full rate until the backlog has
// drained, and the reads get faster as it drains, while where delay buys
// nothing the writers slow within a second or two and the reads stay as
// they were (probing after 2 s of losing, without it, released the delay
// at every deep queue's onset). Either way no probe starts where the
// window's median read is under the set point (a mean held over it by a
// heavy tail: a probe there tipped the ssd at 0.2 ms into three times
// the delay) or its mean fell by gainMinBenefit from the window before
// (a backlog draining: the delay works).
//
// The probe walks the delay down a staircase from the window's mean
// delay D: D × gainStepShare (0.25), … for gainSteps (1) steps, then 0.
// A loop that is losing needs more than D if delay helps at all, yet D
// may be more than the reads need; stepping down finds the need before
// it lets a backlog in (a release to 0 at once filled the ssd's write
// cache, and its reads waited 60 ms for seconds). Each step lasts
// gainProbeTicks (15) ticks, the first gainSettle (5) not counted while
// the device's queue follows, and its mean read is compared with the
// window's: the gain is their difference over the difference of the
// delays (ms per ms, Output.GainMsPerMs). A signal over gainClearRise
// (2) × the window's mean ends a step at once (the signal, not a tick's
// few reads: noise must not end a futile loop's probe). A step
// slower by gainMinBenefit (0.1, about what a tick's mean of a few reads
// scatters over a step) or more says the delay helps: the controller
// goes on from D, and from the signal it had before the probe (the
// steps' reads measured less delay than the writers need). A staircase down to 0
// without one makes the loop Futile (gainFutile): the delay is held at 0
// while the controller runs on.
//
// A futile loop over its set point probes the other way (gainApplying: D
// applied for one step) gainRecheckEvery (30 s) after the verdict, the
// wait doubling with each futile probe up to gainRecheckMax (4 min); the
// step ends early once the delay, not the devices, has held the writers'
// completions under gainTookEffect of the window's for gainSettle ticks,
// whose reads are then its answer (where delay helps a queue the writes
// complete at the full rate until the backlog has drained). It returns
// to the controller at D for a benefit of gainResumeBenefit (0.5: a
// delay that halves the latency; applying a delay answers faster than
// releasing it, as writers recover only as TCP reopens its window, and a
// delay that makes each read a little faster makes the writers' bursts
// longer: in the lab's ssd, probes saw 40-50 % less latency under the
// delay of a run that was slower with it; where delay helps a queue it
// helps by factors): a change of workload where delay helps is caught. A
// set empty for ArmHold forgets the verdict.
//
// Where delay helps the rule costs a step of less delay
// now and then, while the loop is losing anyway (the simulator's thesis
// workload at 10 ms: 1.8 % of seconds over the threshold, 0.4 % without
// the rule); where it buys nothing, the writers lose the seconds of
// delay before the delay is seen to reach them, the probe's steps, and
// the part of a recheck's step before they are held.
//
// After the loop the engine names the resource's returning writers:
// consumers that were members within ArmHold, paused (no write within
// ActiveWindow, 1 s: a writer held at a long delay completes no write in
// some ticks, and must not be counted out and back in) and are not
// members now. The data path holds them at the loop's output from their
// first write, since a writer is found by its writes a tick after they
// have reached the disk; a named writer stays named while it rejoins, for
// up to ActiveWindow. Nobody is delayed for being named.
//
// # Laws and their rules
//
// Every rule but the signal's EWMA, the PID core and the saturation
// report has a switch (Rules, RuleNames); LawRules says which each law
// runs:
//
//	rule          pid  thesis  none
//	idle-hold      on    on     on    step 1
//	armed          on    on     on    step 2
//	err-cap        on    off    off   step 3
//	floor          on    off    off   step 3, the release under it (the start from rest is the core)
//	rest           on    off    off   step 3
//	first-climb    on    off    off   step 3
//	relapse        on    off    off   step 3
//	recall         on    off    off   step 3
//	rebase         on    off    off   step 3
//	ceiling        on    off    off   step 4 (off: fixed at UMaxMs, saturation at it)
//	far-raise      on    off    off   step 4, the faster raise far over
//	retarget       on    off    off   reloads: a new threshold or headroom moves the set point
//	gain           on    off    off   step 6: a delay that buys nothing is released
//
// The idle hold, armed pauses and the saturation report run under every law.
// "thesis" is a faithful copy of the buggy arithmetic of thesis Listing
// A.2 (see Thesis), kept to compare with pid on the same run: it has none
// of the other inputs. "none" never delays: the baseline. LoopConfig.Off
// switches rules off by name on top of the table, for ablations.
//
// # Reloads
//
// A reload builds a new loop from the new settings and Loop.Adopt gives
// it the running one's memory, so that a reload changes what the new
// settings change and little else: the signal (re-weighted for a new α),
// the rules' timers, the controller while its law and gains are the same
// (moved to a new set point without a kick, or rebuilt at rest where it
// cannot move), the ceiling within the new bounds. New gains or another
// law rebuild the controller at rest: its first ticks let the writers
// through for about a second (docs/ablation.md).
//
// A tenant's own read promise moves the threshold the same way
// (Loop.SetThreshold): while the strictest reader active on a resource
// has its own threshold, the loop holds that one, and relaxes to the
// next when the reader goes quiet, with no restart and no kick. Only a
// stricter promise is answered as a step: its reader is reading now,
// behind writers held for a looser promise, so the controller keeps its
// error history against the old set point (PID.StepTarget) and its
// proportional part answers at once instead of integrating over seconds
// of that reader's reads.
//
// # Tenants
//
// The loop decides one delay for the resource's set. What a tenant book
// (package tenant) promises each consumer beyond that — its own read
// promise, a share among the writers, a reserved rate, a cap — needs
// each consumer's own measurements, which the loop does not see, so those
// rules live in package engine ("Tenants" in tenants.go, with their
// constants and reasons): the strictest active reader's threshold is the
// loop's; while throttled, each member's delay is the loop's scaled
// closed loop on the writers' rates toward their shares (the loop's
// output stays the share-weighted mean); a reserved writer under its
// reservation gets a delay of its own, and a conflict with the read
// promise is reported and settled by the book's precedence; a capped
// writer is held by a token bucket loop on its rate whether or not the
// resource is throttled. Without a book none of them acts and the loop
// decides alone, bit for bit as before.
//
// # Asymmetries
//
// The plant is asymmetric: a saturated disk's latency rises within a few
// hundred ms and falls as soon as the queue drains, while writers slowed
// by a large delay recover only as TCP reopens its window. So the delay
// rises promptly (the P term, the first climb, the faster raise of
// the ceiling far over) and falls steadily: under the set point the
// integral takes a factor e^(Kp·(T/Ti)·|ε|) a tick, fast far under and
// slowly near; near the delay that last let an overload in it falls
// slowly (the relapse guard); the ceiling falls only after 10 s under
// half of it; a pause keeps the delay (armed) rather than releasing it.
//
// # Tuning constants of the controller (DefaultParams)
//
//	TargetMs = 15      the thesis's §5.8 threshold (the set point is
//	                   set per resource, threshold × (1 − headroom)).
//	Kp = 0.6           a relative error of 1 multiplies the delay by
//	                   e^0.6 ≈ 1.8 at once: a burst is met within a tick
//	                   or two; the lowest worst-case p95 in the
//	                   simulator's sweep (sim.SimGains), higher Kp costs
//	                   write throughput for nothing.
//	Ti = 500 ms        five ticks: removes P's steady-state error without
//	                   racing the EWMA's lag into oscillation.
//	Td = 50 ms         Td/T = 0.5: damps the overshoot of the EWMA's lag;
//	                   more amplifies the noise of a mean of few reads.
//	T = 100 ms         the tick; it scales Ti and Td.
//	UMaxMs = 20        where the ceiling starts: the top of the thesis's
//	                   range (§4.4, §5.7).
//	ErrCap = 3         see step 3.
//
// Change them through Params (the config's [pid] section), never here
// alone; the simulator's gate (internal/sim, TestGateLawUnchanged) says
// when a change changes what the law decides.
//
// # Actuator and limits
//
// The delay is applied by package throttle to the TCP packets the target
// sends to the members: ACKs and iSCSI R2T/response PDUs when writers are
// slowed (the default), data segments when readers are. A per-packet
// delay slows a flow smoothly, without drops; the data path also limits
// how fast the delay a flow meets may rise, and keeps each flow's order.
//
// # Monitoring
//
// The engine reports per resource and tick (the daemon's log, metrics,
// `sanqos status`, the record): the raw value and the filtered signal,
// the threshold and set point, the controller's output and the delay in
// force (0 while the set is empty), the ceiling and its limit, the flags
// Held, Armed, Saturated, Futile and Probing, the measured gain, the
// delay the relapse guard remembers while it holds, the delay a climb
// from rest would recall, the oldest read in flight, the source (ebpf
// or diskstats) and statistic, the set's members and the returning
// writers, e.g.
//
//	resource=vg-data raw_ms=41.2 signal_ms=33.9 threshold_ms=15 delay_ms=3.78 members=10.0.0.3,10.0.0.4
//
// A resource at rest shows delay_ms=0 and no members. Saturated (a
// warning, the sanqos_resource_saturated metric, SATURATED in status)
// says the resource cannot be brought under its threshold by delaying its
// writers: the threshold is too low, the load is reads, or the writers
// need a rate limit.
package control
