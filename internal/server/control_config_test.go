package server

import (
	"strings"
	"testing"
	"time"
)

func TestParseControlFlags(t *testing.T) {
	t.Setenv(StoreEnv, "")
	base := []string{"--store", "postgres://u@db/space", "--worker-token-file", "/s/token", "--admin-key-file", "/s/admin"}
	cfg, err := ParseControlFlags(append(base, "--namespace", "sbx", "--schedule-timeout", "30s"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != "127.0.0.1:8080" || cfg.Namespace != "sbx" || cfg.LeaderLease != "sbx/"+DefaultLeaderLeaseName ||
		cfg.ScheduleTimeout != 30*time.Second || cfg.Kubeconfig != "" || cfg.SecretsKeyFile != "" {
		t.Fatalf("defaults: %+v", cfg)
	}
	if cfg.KubeRate != DefaultControlKubeRate {
		t.Errorf("Kubernetes rate %+v, want the default %+v (client-go's own is 5 a second)", cfg.KubeRate, DefaultControlKubeRate)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--worker-token-file", "t", "--admin-key-file", "a"}, "needs --store"},
		{[]string{"--store", "/var/lib/space.db", "--worker-token-file", "t", "--admin-key-file", "a"}, "postgres://"},
		{[]string{"--store", "postgres://u@db/space", "--admin-key-file", "a"}, "--worker-token-file"},
		{[]string{"--store", "postgres://u@db/space", "--worker-token-file", "t"}, "--admin-key-file"},
		{append(base, "--leader-lease", "no-slash"), "namespace/name"},
		{append(base, "--schedule-timeout", "0s"), "positive"},
		{append(base, "--pod-toleration-seconds", "-1"), "negative"},
		{append(base, "--object-store", "s3://bucket"), "--object-store"},
		{append(base, "extra"), "unexpected arguments"},
		{append(base, "--kube-qps", "0"), "--kube-qps"},
		{append(base, "--kube-burst", "0"), "--kube-burst"},
	} {
		_, err := ParseControlFlags(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error with %q", tc.args, err, tc.want)
		}
	}
	// The store's password never shows in its error.
	_, err = ParseControlFlags([]string{"--store", "mysql://u:hunter2@db/x", "--worker-token-file", "t", "--admin-key-file", "a"})
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("bad store: %v", err)
	}
}
