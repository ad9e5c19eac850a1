package config

// Tenants is the [tenants] section: consumers by name, address or
// initiator name, with the terms each is promised (issue 36). It is data
// here; internal/decide/tenant validates it (cmd/sanqos maps it there and names
// the key of what it refuses).
type Tenants struct {
	// Conflict is which wins when a reservation and a read promise
	// cannot both be met: "promise" (the default) or "reservation".
	Conflict string `toml:"conflict"`
	// Class holds [tenants.class.NAME] sections: terms consumers take
	// by naming the class; a consumer's own keys override its class's.
	Class map[string]TenantTerms `toml:"class"`
	// Consumer holds the [[tenants.consumer]] entries, in order: the
	// first whose match selects a consumer gives its terms.
	Consumer []TenantConsumer `toml:"consumer"`
}

// TenantTerms are the terms a class or a consumer sets; a nil field is
// not set (a consumer's unset key is its class's, else the default).
type TenantTerms struct {
	Share     *float64  `toml:"share"`
	Reserve   *Rate     `toml:"reserve"`
	Cap       *Rate     `toml:"cap"`
	Burst     *Size     `toml:"burst"`
	ReadCap   *Rate     `toml:"read_cap"`
	Threshold *Duration `toml:"threshold"`
}

// TenantConsumer is one [[tenants.consumer]] entry.
type TenantConsumer struct {
	Name  string   `toml:"name"`
	Match []string `toml:"match"`
	Class string   `toml:"class"`
	TenantTerms
}

// Over returns t with each key o sets replacing t's.
func (t TenantTerms) Over(o TenantTerms) TenantTerms {
	if o.Share != nil {
		t.Share = o.Share
	}
	if o.Reserve != nil {
		t.Reserve = o.Reserve
	}
	if o.Cap != nil {
		t.Cap = o.Cap
	}
	if o.Burst != nil {
		t.Burst = o.Burst
	}
	if o.ReadCap != nil {
		t.ReadCap = o.ReadCap
	}
	if o.Threshold != nil {
		t.Threshold = o.Threshold
	}
	return t
}
