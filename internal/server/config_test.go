package server

import (
	"slices"
	"testing"
)

func TestParseFlagsRegistryAllow(t *testing.T) {
	cfg, err := ParseFlags([]string{"--template-registry-allow", "reg.internal:5000, 10.0.0.5", "--template-registry-allow", "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"reg.internal:5000", "10.0.0.5", "localhost"}; !slices.Equal(cfg.TemplateRegistryAllow, want) {
		t.Errorf("TemplateRegistryAllow = %q, want %q", cfg.TemplateRegistryAllow, want)
	}
	if cfg, err = ParseFlags(nil); err != nil || len(cfg.TemplateRegistryAllow) != 0 {
		t.Errorf("default: %q, %v; want none", cfg.TemplateRegistryAllow, err)
	}
}
