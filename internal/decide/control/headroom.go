package control

// Headroom (step 5 of the law, doc.go): the set point lies a headroom
// below the threshold, since the promise is about single seconds and the
// controller holds their mean.

// DefaultHeadroom is where the set point lies below the threshold unless
// configured: it holds a second's p95 near the threshold for a scatter of
// up to about 10 %, with the initiator seeing about 0.5 ms more than the
// target's devices.
const DefaultHeadroom = 0.15
