package egress

import (
	"github.com/space-sandbox/space/internal/budget"
)

// The per-sandbox budgets of the egress path, by their metric label
// (docs/security.md, "Egress proxy and DNS").
const (
	// budgetConns counts proxied TCP connections open at once.
	budgetConns budget.Kind = "egress_connections"
	// budgetDNSQueries counts DNS queries (UDP and TCP) being answered.
	budgetDNSQueries budget.Kind = "dns_queries"
	// budgetDNSTCP counts DNS-over-TCP connections open at once.
	budgetDNSTCP budget.Kind = "dns_tcp_connections"
	// budgetLookupRate is a rate, not slots: it counts only the lookups
	// refused past a sandbox's rate.
	budgetLookupRate budget.Kind = "dns_lookup_rate"
)

// budgets are the Service's per-sandbox budgets, shared by its sandboxes
// (each counted under its own id).
type budgets struct {
	conns      *budget.Set
	dnsQueries *budget.Set
	dnsTCP     *budget.Set
	lookupRate *budget.Set
}

func newBudgets(cfg Config) budgets {
	return budgets{
		conns:      budget.New(budgetConns, cfg.MaxConns, cfg.Budgets),
		dnsQueries: budget.New(budgetDNSQueries, cfg.DNSQueries, cfg.Budgets),
		dnsTCP:     budget.New(budgetDNSTCP, cfg.DNSTCPConns, cfg.Budgets),
		lookupRate: budget.New(budgetLookupRate, 0, cfg.Budgets),
	}
}
