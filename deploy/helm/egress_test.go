package helm

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/space-sandbox/space/internal/netrange"
	"github.com/space-sandbox/space/internal/server"
)

// egressValues describe a cluster whose Pod and Service networks are not
// private (so only the chart's values keep sandboxes out of them), an
// operator's deny list and allowed corporate range, and an object store
// addressed by IP on a private network.
func egressValues(t *testing.T) map[string]any {
	return merge(required(), valuesYAML(t, `
objectStore: {url: "s3://space-snapshots?endpoint=10.0.0.9:9000&tls=false"}
cluster: {podCIDRs: [11.0.0.0/16, "fd10::/56"], serviceCIDRs: [11.96.0.0/12]}
egress: {allowPrivate: [10.50.0.0/16], deny: [203.0.113.0/24]}
`))
}

// The cluster's networks and the operator's lists reach the worker as the
// flags spaced parses into its egress configuration.
func TestWorkerEgressFlags(t *testing.T) {
	objs := mustRender(t, egressValues(t))
	ds := get[*appsv1.DaemonSet](t, objs, "space-worker")
	w := container(t, ds.Spec.Template.Spec, "worker")
	for _, a := range []string{"--egress-deny=11.0.0.0/16,fd10::/56,11.96.0.0/12,203.0.113.0/24", "--egress-allow-private=10.50.0.0/16"} {
		if !slices.Contains(w.Args, a) {
			t.Errorf("worker args %q lack %s", w.Args, a)
		}
	}
	cfg, err := server.ParseWorkerFlags(containerArgs(t, objs, w, "worker"))
	if err != nil {
		t.Fatal(err)
	}
	if want := prefixes("11.0.0.0/16", "fd10::/56", "11.96.0.0/12", "203.0.113.0/24"); !slices.Equal(cfg.EgressDeny, want) {
		t.Errorf("worker's egress deny %v, want %v", cfg.EgressDeny, want)
	}
	if want := prefixes("10.50.0.0/16"); !slices.Equal(cfg.EgressAllowPrivate, want) {
		t.Errorf("worker's egress allow-private %v, want %v", cfg.EgressAllowPrivate, want)
	}
	// By default neither flag: the proxy's private ranges hold alone.
	w = container(t, get[*appsv1.DaemonSet](t, mustRender(t, required()), "space-worker").Spec.Template.Spec, "worker")
	for _, a := range w.Args {
		if strings.HasPrefix(a, "--egress-") {
			t.Errorf("default worker args carry %s", a)
		}
	}
}

// dest is a connection a worker Pod makes: to an address and port, and,
// when the address is a Pod's of the release namespace, that Pod's labels.
type dest struct {
	addr  string
	port  int32
	proto corev1.Protocol
	pod   map[string]string
}

// egressAllows evaluates a NetworkPolicy's egress rules as the API defines
// them: a rule admits a connection when one of its ports matches (no
// ports: any) and one of its peers does (no peers: any destination); an
// ipBlock matches its CIDR minus its exceptions, a podSelector (without a
// namespaceSelector) the Pods of the policy's namespace with its labels.
func egressAllows(t *testing.T, np *networkingv1.NetworkPolicy, d dest) bool {
	t.Helper()
	a := netip.MustParseAddr(d.addr)
	for _, r := range np.Spec.Egress {
		portOK := len(r.Ports) == 0
		for _, p := range r.Ports {
			proto := corev1.ProtocolTCP
			if p.Protocol != nil {
				proto = *p.Protocol
			}
			portOK = portOK || (proto == d.proto && (p.Port == nil || p.Port.IntValue() == int(d.port)))
		}
		if !portOK {
			continue
		}
		if len(r.To) == 0 {
			return true
		}
		for _, peer := range r.To {
			switch {
			case peer.IPBlock != nil:
				if !netip.MustParsePrefix(peer.IPBlock.CIDR).Contains(a) {
					continue
				}
				excepted := false
				for _, e := range peer.IPBlock.Except {
					excepted = excepted || netip.MustParsePrefix(e).Contains(a)
				}
				if !excepted {
					return true
				}
			case peer.PodSelector != nil && peer.NamespaceSelector == nil:
				if d.pod != nil && labels.SelectorFromSet(peer.PodSelector.MatchLabels).Matches(labels.Set(d.pod)) {
					return true
				}
			default:
				t.Fatalf("peer %+v: not evaluated by this test", peer)
			}
		}
	}
	return false
}

// The workers' egress NetworkPolicy lets a worker reach DNS, the control
// plane, the API server, its object store, what the operator opened and
// the internet, and none of the private ranges, the cluster's Pods and
// Services (PostgreSQL, other components) or cloud metadata.
func TestWorkerEgressPolicy(t *testing.T) {
	objs := mustRender(t, egressValues(t))
	ds := get[*appsv1.DaemonSet](t, objs, "space-worker")
	ctl := get[*appsv1.Deployment](t, objs, "space-control")
	np := get[*networkingv1.NetworkPolicy](t, objs, "space-worker-egress")
	if !selects(t, np.Spec.PodSelector.MatchLabels, ds.Spec.Template.Labels) || !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}) {
		t.Fatalf("egress policy selects %v (types %v), not the workers' egress", np.Spec.PodSelector.MatchLabels, np.Spec.PolicyTypes)
	}
	controlPod := ctl.Spec.Template.Labels
	otherPod := map[string]string{"app.kubernetes.io/name": "postgresql"}
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	for _, tc := range []struct {
		what string
		d    dest
		want bool
	}{
		{"the internet", dest{"8.8.8.8", 443, tcp, nil}, true},
		{"the internet over IPv6", dest{"2001:4860:4860::8888", 443, tcp, nil}, true},
		{"a resolver", dest{"10.0.0.53", 53, udp, nil}, true},
		{"a resolver over TCP", dest{"10.0.0.53", 53, tcp, nil}, true},
		{"the control plane", dest{"11.0.3.4", 8080, tcp, controlPod}, true},
		{"the API server", dest{"10.0.0.10", 6443, tcp, nil}, true},
		{"the object store", dest{"10.0.0.9", 9000, tcp, nil}, true},
		{"the operator's allowed range", dest{"10.50.1.1", 5432, tcp, nil}, true},

		{"another port of the control plane", dest{"11.0.3.4", 9999, tcp, controlPod}, false},
		{"another host on the object store's port", dest{"10.0.0.8", 9000, tcp, nil}, false},
		{"PostgreSQL on a private address", dest{"10.1.2.3", 5432, tcp, nil}, false},
		{"a Pod of the cluster", dest{"11.0.5.6", 5432, tcp, otherPod}, false},
		{"a Service of the cluster", dest{"11.96.0.20", 80, tcp, nil}, false},
		{"an IPv6 Pod", dest{"fd10::5", 80, tcp, nil}, false},
		// (Port 443 stays open to any address for the API server unless
		// apiServerTo narrows it: the next test.)
		{"the operator's denied range", dest{"203.0.113.5", 80, tcp, nil}, false},
		{"cloud metadata", dest{"169.254.169.254", 80, tcp, nil}, false},
		{"AWS metadata over IPv6", dest{"fd00:ec2::254", 80, tcp, nil}, false},
		{"CGNAT", dest{"100.64.0.1", 80, tcp, nil}, false},
		{"RFC 1918 (192.168)", dest{"192.168.1.1", 80, tcp, nil}, false},
		{"RFC 1918 (172.16)", dest{"172.16.0.1", 22, tcp, nil}, false},
		{"benchmarking", dest{"198.18.0.1", 80, tcp, nil}, false},
		{"a kubelet", dest{"10.0.0.21", 10250, tcp, nil}, false},
	} {
		if got := egressAllows(t, np, tc.d); got != tc.want {
			t.Errorf("%s (%s:%d/%s): allowed %v, want %v", tc.what, tc.d.addr, tc.d.port, tc.d.proto, got, tc.want)
		}
	}

	// The exceptions of the internet rule are the egress proxy's own
	// refused ranges, in both families.
	var except []string
	for _, r := range np.Spec.Egress {
		for _, p := range r.To {
			if p.IPBlock != nil && (p.IPBlock.CIDR == "0.0.0.0/0" || p.IPBlock.CIDR == "::/0") {
				except = append(except, p.IPBlock.Except...)
			}
		}
	}
	for _, p := range append(netrange.Private(), netrange.Never()...) {
		if !slices.Contains(except, p.String()) {
			t.Errorf("the internet rule does not except %s, which the egress proxy refuses", p)
		}
	}

	// Without values narrowing them, DNS, the API server and the object
	// store are any address on their ports; nothing else private opens.
	np = get[*networkingv1.NetworkPolicy](t, mustRender(t, required()), "space-worker-egress")
	for _, tc := range []struct {
		d    dest
		want bool
	}{
		{dest{"10.9.9.9", 443, tcp, nil}, true}, {dest{"10.9.9.9", 6443, tcp, nil}, true}, {dest{"10.9.9.9", 53, udp, nil}, true},
		{dest{"10.9.9.9", 5432, tcp, nil}, false}, {dest{"10.9.9.9", 9000, tcp, nil}, false}, {dest{"169.254.169.254", 80, tcp, nil}, false},
		{dest{"1.1.1.1", 80, tcp, nil}, true},
	} {
		if got := egressAllows(t, np, tc.d); got != tc.want {
			t.Errorf("defaults: %s:%d/%s allowed %v, want %v", tc.d.addr, tc.d.port, tc.d.proto, got, tc.want)
		}
	}

	off := mustRender(t, merge(required(), valuesYAML(t, `networkPolicy: {workerEgress: {enabled: false}}`)))
	if n := len(all[*networkingv1.NetworkPolicy](off)); n != 1 {
		t.Errorf("workerEgress.enabled false: %d network policies, want the ingress one only", n)
	}
	if _, err := render(t, merge(required(), valuesYAML(t, `objectStore: {url: "s3://b?endpoint=s3.example.internal"}`))); err == nil || !strings.Contains(err.Error(), "endpoint needs a port") {
		t.Errorf("object store without a port: %v", err)
	}
}

// The egress policy of a dual-stack cluster with every value set is
// accepted by a real API server.
func TestWorkerEgressPolicyApplies(t *testing.T) {
	vals := merge(egressValues(t), valuesYAML(t, `
networkPolicy:
  workerEgress:
    dnsTo: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: kube-system}}, podSelector: {matchLabels: {k8s-app: kube-dns}}}]
    apiServerTo: [{ipBlock: {cidr: 10.0.0.10/32}}]
    extraEgress: [{to: [{ipBlock: {cidr: 10.60.0.5/32}}], ports: [{protocol: TCP, port: 5000}]}]
`))
	a := applyRelease(t, "egress", "egress-system", vals)
	get[*networkingv1.NetworkPolicy](t, a.objs, "egress-space-worker-egress")
}

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}
