// Package plan is the throttle state the daemon hands a backend every
// tick (State: groups of consumers, their delays, ports and armed
// consumers) and what it means on the wire whichever backend applies it:
// the ipset of each group (SetName, WantSets), which groups and members
// a backend can program (Split, Refused), the small-segment split of
// each target port that tells the write direction from the read
// direction (SmallOf, SplitGroups), and the backends' counters (Stats).
// It programs nothing: package throttle's backends turn a plan into
// rules, queues and qdiscs.
package plan
