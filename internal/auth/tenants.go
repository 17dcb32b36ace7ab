package auth

import (
	"context"
	"fmt"
	"strings"

	"github.com/space-sandbox/space/internal/store"
)

// TenantInfo is a tenant with what its live sandboxes hold now.
type TenantInfo struct {
	*store.Tenant
	Usage store.Usage
}

// ListTenants returns every tenant, oldest first, each with its usage.
func (a *Authenticator) ListTenants(ctx context.Context) ([]TenantInfo, error) {
	ts, err := a.store.ListTenants(ctx)
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	out := make([]TenantInfo, 0, len(ts))
	for _, t := range ts {
		u, err := a.store.SandboxUsage(ctx, t.ID)
		if err != nil {
			return nil, fmt.Errorf("tenant usage: %w", err)
		}
		out = append(out, TenantInfo{Tenant: t, Usage: u})
	}
	return out, nil
}

// ListKeys returns tenant tenantID's keys, revoked ones included, oldest
// first. The records carry the secret's hash: never show it.
func (a *Authenticator) ListKeys(ctx context.Context, tenantID string) ([]*store.APIKey, error) {
	ks, err := a.store.ListAPIKeys(ctx, tenantID)
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	return ks, nil
}

// KeyFormat is the format a key was made in (FormatSpace or FormatE2B),
// read from the display prefix kept with it: the two formats start
// differently and the prefix is longer than either start.
func KeyFormat(k *store.APIKey) string {
	if strings.HasPrefix(k.Prefix, E2BKeyPrefix) {
		return FormatE2B
	}
	return FormatSpace
}

// UpdateQuota applies change to tenant tenantID's quota and stores it, in
// one transaction, and returns the tenant as it is then.
func (a *Authenticator) UpdateQuota(ctx context.Context, tenantID string, change func(*store.Quota)) (*TenantInfo, error) {
	var out TenantInfo
	err := a.store.Atomic(ctx, func(ctx context.Context, tx store.Store) error {
		t, err := tx.GetTenant(ctx, tenantID)
		if err != nil {
			return err
		}
		change(&t.Quota)
		if err := tx.SetTenantQuota(ctx, t.ID, t.Quota); err != nil {
			return err
		}
		u, err := tx.SandboxUsage(ctx, t.ID)
		if err != nil {
			return err
		}
		out = TenantInfo{Tenant: t, Usage: u}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("set quota: %w", err)
	}
	a.log.InfoContext(ctx, "tenant quota set", "tenant", tenantID, "max_sandboxes", out.Quota.MaxSandboxes,
		"max_vcpus", out.Quota.MaxVCPUs, "max_memory_mib", out.Quota.MaxMemoryMiB)
	return &out, nil
}
