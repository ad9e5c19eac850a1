package throttle

import "github.com/sanqos/sanqos/internal/act/owned"

// Drift is one object of ours that the kernel no longer holds as we
// installed it (see package owned, which installs and verifies the
// chains and sets; the tc backends report their qdiscs the same way).
type Drift = owned.Drift
