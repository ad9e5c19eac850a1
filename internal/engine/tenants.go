package engine

import "github.com/sanqos/sanqos/internal/tenant"

// SetTenants replaces the tenant book (at reload). It takes effect at
// the next Step; what the loops hold is kept, so no delay in force is
// dropped by a changed book.
func (e *Engine) SetTenants(b *tenant.Book) { e.cfg.Tenants = b }
