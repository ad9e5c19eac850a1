package main

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/sanqos/sanqos/internal/act/throttle"
	"github.com/sanqos/sanqos/internal/config"
	"github.com/sanqos/sanqos/internal/decide/tenant"
	"github.com/sanqos/sanqos/internal/fielderr"
)

// tenantBook maps the [tenants] section onto the tenant package, which
// validates it; a consumer takes its class's keys unless it sets them
// itself. An unknown class is refused here: only the file knows classes.
func tenantBook(c config.Config) (*tenant.Book, error) {
	entries, err := tenantEntries(c)
	if err != nil {
		return nil, err
	}
	return tenant.New(entries, tenant.Precedence(c.Tenants.Conflict))
}

// tenantEntries are the [[tenants.consumer]] entries with their classes
// applied, in the file's units turned into the tenant package's.
func tenantEntries(c config.Config) ([]tenant.Entry, error) {
	var out []tenant.Entry
	for i, tc := range c.Tenants.Consumer {
		own := tc.TenantTerms
		if tc.Class != "" {
			class, ok := c.Tenants.Class[tc.Class]
			if !ok {
				known := strings.Join(slices.Sorted(maps.Keys(c.Tenants.Class)), ", ")
				if known == "" {
					known = "none"
				}
				return nil, c.KeyError(consumerKey(c, i)+".class", strconv.Quote(tc.Class),
					fmt.Sprintf("names no [tenants.class.%s] section (known classes: %s)", tc.Class, known))
			}
			own = class.Over(own)
		}
		out = append(out, tenant.Entry{Match: tc.Match, Terms: tenantTerms(tc.Name, tc.Class, own)})
	}
	return out, nil
}

func tenantTerms(name, class string, t config.TenantTerms) tenant.Terms {
	out := tenant.Terms{Name: name, Class: class}
	if t.Share != nil {
		out.Share = *t.Share
	}
	if t.Reserve != nil {
		out.ReserveBps = float64(*t.Reserve)
	}
	if t.Cap != nil {
		out.CapBps = float64(*t.Cap)
	}
	if t.Burst != nil {
		out.BurstBytes = float64(*t.Burst)
	}
	if t.ReadCap != nil {
		out.ReadCapBps = float64(*t.ReadCap)
	}
	if t.Threshold != nil {
		out.ThresholdMs = durMs(t.Threshold.Duration)
	}
	return out
}

// consumerKey is how the file's key names consumer i: by its name, else
// by its place.
func consumerKey(c config.Config, i int) string {
	if n := c.Tenants.Consumer[i].Name; n != "" {
		return fmt.Sprintf("tenants.consumer %q", n)
	}
	return fmt.Sprintf("tenants.consumer[%d]", i)
}

// tenantKey maps a field the tenant package refused to the key that set
// it: the consumer's own, or its class's when the consumer left it to
// the class.
func tenantKey(c config.Config, f *fielderr.Error) (key, bool) {
	if f.Field == "tenant.Book.Precedence" {
		return key{"tenants.conflict", strconv.Quote(c.Tenants.Conflict), ""}, true
	}
	if !strings.HasPrefix(f.Field, "tenant.") {
		return key{}, false
	}
	i := slices.IndexFunc(c.Tenants.Consumer, func(tc config.TenantConsumer) bool { return tc.Name == f.Key })
	if i < 0 {
		n, err := strconv.Atoi(f.Key)
		if err != nil || n < 0 || n >= len(c.Tenants.Consumer) {
			return key{}, false
		}
		i = n
	}
	tc := c.Tenants.Consumer[i]
	switch f.Name {
	case "match":
		return key{consumerKey(c, i) + ".match", f.Value, ""}, true
	case "name":
		return key{consumerKey(c, i) + ".name", strconv.Quote(tc.Name), ""}, true
	}
	if v, ok := termValue(tc.TenantTerms, f.Name); ok {
		return key{consumerKey(c, i) + "." + f.Name, v, ""}, true
	}
	if v, ok := termValue(c.Tenants.Class[tc.Class], f.Name); ok {
		return key{fmt.Sprintf("tenants.class.%s.%s", tc.Class, f.Name), v, fmt.Sprintf(" (consumer %s takes it from its class)", strings.TrimPrefix(consumerKey(c, i), "tenants.consumer "))}, true
	}
	return key{consumerKey(c, i) + "." + f.Name, f.Value, ""}, true
}

// termValue is key name of t as the file wrote it, if t sets it.
func termValue(t config.TenantTerms, name string) (any, bool) {
	switch {
	case name == "share" && t.Share != nil:
		return *t.Share, true
	case name == "reserve" && t.Reserve != nil:
		return *t.Reserve, true
	case name == "cap" && t.Cap != nil:
		return *t.Cap, true
	case name == "burst" && t.Burst != nil:
		return *t.Burst, true
	case name == "read_cap" && t.ReadCap != nil:
		return *t.ReadCap, true
	case name == "threshold" && t.Threshold != nil:
		return *t.Threshold, true
	}
	return nil, false
}

// tenantReadCaps refuses a read_cap on a data path that cannot cap
// rates, as manual.read_rates is refused.
func tenantReadCaps(c config.Config, o throttle.Options) error {
	if o.CapsRates() {
		return nil
	}
	for i, tc := range c.Tenants.Consumer {
		own := tc.TenantTerms
		key := consumerKey(c, i) + ".read_cap"
		if own.ReadCap == nil {
			own = c.Tenants.Class[tc.Class]
			key = fmt.Sprintf("tenants.class.%s.read_cap", tc.Class)
		}
		if own.ReadCap != nil && *own.ReadCap > 0 {
			return c.KeyError(key, *own.ReadCap, "needs a data path that caps rates: set rate_dev (--rate-dev) to the interface towards the initiators")
		}
	}
	return nil
}
