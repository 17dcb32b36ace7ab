package helm

import (
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/space-sandbox/space/internal/server"
)

// TestFlagsParse gives the args the chart renders for both components, for
// the required and the other values, to spaced's own flag parsers
// (server.ParseControlFlags, server.ParseWorkerFlags), with $(VAR) expanded
// from the container's env as the kubelet does and the env set as the
// container gets it: a flag the chart passes that spaced does not parse,
// or a value it refuses, fails here. The files the flags name must be
// mounted in the container.
func TestFlagsParse(t *testing.T) {
	for _, tc := range []struct {
		name string
		vals map[string]any
	}{{"required values", required()}, {"other values", merge(required(), otherValues(t))}} {
		t.Run(tc.name, func(t *testing.T) {
			objs := mustRender(t, tc.vals)
			sandboxes := "space-sandboxes"
			if tc.name == "other values" {
				sandboxes = "agents"
			}

			d := get[*appsv1.Deployment](t, objs, "space-control")
			c := container(t, d.Spec.Template.Spec, "control")
			args := containerArgs(t, objs, c, "control")
			cfg, err := server.ParseControlFlags(args)
			if err != nil {
				t.Fatalf("spaced control refuses the chart's args %q: %v", args, err)
			}
			if cfg.Namespace != sandboxes || cfg.LeaderLease != namespace+"/space-control" || cfg.ObjectStore == "" {
				t.Errorf("control: namespace %q leader lease %q object store %q", cfg.Namespace, cfg.LeaderLease, cfg.ObjectStore)
			}
			if want := map[string]string{"required values": "localhost", "other values": "preview.example.com"}[tc.name]; cfg.PreviewDomain != want {
				t.Errorf("control: preview domain %q, want %q", cfg.PreviewDomain, want)
			}
			for _, f := range []string{cfg.WorkerTokenFile, cfg.AdminKeyFile} {
				mounted(t, d.Spec.Template.Spec, c, f)
			}

			ds := get[*appsv1.DaemonSet](t, objs, "space-worker")
			w := container(t, ds.Spec.Template.Spec, "worker")
			args = containerArgs(t, objs, w, "worker")
			wcfg, err := server.ParseWorkerFlags(args)
			if err != nil {
				t.Fatalf("spaced worker refuses the chart's args %q: %v", args, err)
			}
			port := strconv.Itoa(int(w.Ports[0].ContainerPort))
			if wcfg.Listen != samplePodIP+":"+port || wcfg.Node.NodeName != "space-"+sampleNodeName || wcfg.Node.Namespace != sandboxes {
				t.Errorf("worker: listen %q node %q namespace %q", wcfg.Listen, wcfg.Node.NodeName, wcfg.Node.Namespace)
			}
			if wcfg.ObjectStore.URL == "" {
				t.Error("worker: no --object-store, so suspends stay on the worker's host")
			}
			if tc.name == "other values" && wcfg.ObjectStore.CacheBytes != 16<<30 {
				t.Errorf("worker: --cache-bytes %d, want worker.cacheBytes 16 GiB", wcfg.ObjectStore.CacheBytes)
			}
			if wcfg.Node.Kubeconfig == "" {
				t.Error("worker: no --kubeconfig, so spaced worker would not register its node")
			}
			for _, f := range []string{wcfg.TokenFile, wcfg.Node.Kubeconfig} {
				mounted(t, ds.Spec.Template.Spec, w, f)
			}
		})
	}
}

// The values the kubelet would give the fieldRef env vars.
const (
	samplePodIP    = "10.1.2.3"
	sampleNodeName = "host1"
)

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// containerArgs checks that c's args start with the subcommand, sets c's
// environment in the test's (the parsers read defaults from it) and
// returns the args after the subcommand with $(VAR) expanded.
func containerArgs(t *testing.T, objs objects, c corev1.Container, subcommand string) []string {
	t.Helper()
	if len(c.Args) == 0 || c.Args[0] != subcommand {
		t.Fatalf("%s args %q do not start with %q", c.Name, c.Args, subcommand)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		v := e.Value
		if src := e.ValueFrom; src != nil {
			switch {
			case src.FieldRef != nil && src.FieldRef.FieldPath == "status.podIP":
				v = samplePodIP
			case src.FieldRef != nil && src.FieldRef.FieldPath == "spec.nodeName":
				v = sampleNodeName
			case src.FieldRef != nil:
				v = "from-" + src.FieldRef.FieldPath
			case src.SecretKeyRef != nil:
				v = secretValue(objs, src.SecretKeyRef.Name, src.SecretKeyRef.Key, e.Name)
			}
		}
		env[e.Name] = v
	}
	// The parsers read $SPACE_STORE and friends; unset what c does not set.
	for _, name := range []string{server.StoreEnv, "SPACE_S3_ACCESS_KEY", "SPACE_S3_SECRET_KEY"} {
		if _, ok := env[name]; !ok {
			t.Setenv(name, "")
			_ = os.Unsetenv(name)
		}
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	out := make([]string, 0, len(c.Args)-1)
	for _, a := range c.Args[1:] {
		out = append(out, envRef.ReplaceAllStringFunc(a, func(ref string) string {
			name := envRef.FindStringSubmatch(ref)[1]
			if v, ok := env[name]; ok {
				return v
			}
			return ref // the kubelet leaves unknown references as they are
		}))
	}
	return out
}

// secretValue is key of the rendered Secret name, or, for a Secret of the
// user's own (not rendered), a value of the right shape for envName.
func secretValue(objs objects, name, key, envName string) string {
	for _, s := range all[*corev1.Secret](objs) {
		if s.Name == name {
			if v, ok := s.StringData[key]; ok {
				return v
			}
			return string(s.Data[key])
		}
	}
	if envName == server.StoreEnv {
		return "postgres://space:pw@db.example.internal:5432/space?sslmode=verify-full"
	}
	return "sample-" + key
}

// mounted fails unless file is provided in c by one of its volume mounts:
// a Secret or ConfigMap volume whose items (or, without items, whose
// rendered keys) include the file's path under the mount.
func mounted(t *testing.T, pod corev1.PodSpec, c corev1.Container, file string) {
	t.Helper()
	for _, m := range c.VolumeMounts {
		rel, ok := strings.CutPrefix(file, strings.TrimSuffix(m.MountPath, "/")+"/")
		if !ok {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name != m.Name {
				continue
			}
			var items []corev1.KeyToPath
			switch {
			case v.Secret != nil:
				items = v.Secret.Items
			case v.ConfigMap != nil:
				items = v.ConfigMap.Items
			}
			if len(items) == 0 {
				return // every key of the volume's source is a file
			}
			for _, it := range items {
				if path.Clean(it.Path) == rel {
					return
				}
			}
			t.Errorf("%s: volume %s mounted at %s has no item %s (items %v)", c.Name, v.Name, m.MountPath, rel, items)
			return
		}
	}
	t.Errorf("%s: %s is not in any of its volume mounts %v", c.Name, file, c.VolumeMounts)
}
