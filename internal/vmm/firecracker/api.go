package firecracker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/jail"
)

// The types below are the parts of Firecracker's API (swagger
// firecracker.yaml, v1.16.1, ../shared/reference/) this driver sends or
// reads, with the spec's field names. Optional fields are omitempty so a
// request carries only what the driver means to set.

// machineConfig is definitions/MachineConfiguration.
type machineConfig struct {
	VCPUCount       int    `json:"vcpu_count"`
	MemSizeMiB      int    `json:"mem_size_mib"`
	SMT             bool   `json:"smt"`
	TrackDirtyPages bool   `json:"track_dirty_pages"`
	HugePages       string `json:"huge_pages,omitempty"`
}

// bootSource is definitions/BootSource.
type bootSource struct {
	KernelImagePath string `json:"kernel_image_path"`
	InitrdPath      string `json:"initrd_path,omitempty"`
	BootArgs        string `json:"boot_args,omitempty"`
}

// drive is definitions/Drive (a virtio-block drive).
type drive struct {
	DriveID      string `json:"drive_id"`
	IsRootDevice bool   `json:"is_root_device"`
	IsReadOnly   bool   `json:"is_read_only"`
	PathOnHost   string `json:"path_on_host"`
	CacheType    string `json:"cache_type,omitempty"`
	IOEngine     string `json:"io_engine,omitempty"`
}

// networkInterface is definitions/NetworkInterface.
type networkInterface struct {
	IfaceID     string `json:"iface_id"`
	HostDevName string `json:"host_dev_name"`
	GuestMAC    string `json:"guest_mac,omitempty"`
}

// vsock is definitions/Vsock.
type vsock struct {
	GuestCID int    `json:"guest_cid"`
	UDSPath  string `json:"uds_path"`
}

// entropyDevice is definitions/EntropyDevice.
type entropyDevice struct{}

// logger is definitions/Logger.
type logger struct {
	LogPath       string `json:"log_path"`
	Level         string `json:"level,omitempty"`
	ShowLevel     bool   `json:"show_level"`
	ShowLogOrigin bool   `json:"show_log_origin"`
}

// instanceAction is definitions/InstanceActionInfo.
type instanceAction struct {
	ActionType string `json:"action_type"`
}

// vmState is definitions/Vm.
type vmState struct {
	State string `json:"state"`
}

// snapshotCreate is definitions/SnapshotCreateParams.
type snapshotCreate struct {
	SnapshotPath string `json:"snapshot_path"`
	MemFilePath  string `json:"mem_file_path"`
	SnapshotType string `json:"snapshot_type,omitempty"`
}

// memoryBackend is definitions/MemoryBackend.
type memoryBackend struct {
	BackendType string `json:"backend_type"`
	BackendPath string `json:"backend_path"`
}

// networkOverride is definitions/NetworkOverride.
type networkOverride struct {
	IfaceID     string `json:"iface_id"`
	HostDevName string `json:"host_dev_name"`
}

// vsockOverride is definitions/VsockOverride.
type vsockOverride struct {
	UDSPath string `json:"uds_path"`
}

// snapshotLoad is definitions/SnapshotLoadParams. mem_file_path is
// deprecated; the driver always sends mem_backend.
type snapshotLoad struct {
	SnapshotPath     string            `json:"snapshot_path"`
	MemBackend       memoryBackend     `json:"mem_backend"`
	TrackDirtyPages  bool              `json:"track_dirty_pages"`
	ResumeVM         bool              `json:"resume_vm"`
	NetworkOverrides []networkOverride `json:"network_overrides,omitempty"`
	VsockOverride    *vsockOverride    `json:"vsock_override,omitempty"`
}

// instanceInfo is definitions/InstanceInfo.
type instanceInfo struct {
	AppName    string `json:"app_name"`
	ID         string `json:"id"`
	State      string `json:"state"` // "Not started", "Running", "Paused"
	VMMVersion string `json:"vmm_version"`
}

// apiError is definitions/Error: every non-2xx answer carries one.
type apiError struct {
	FaultMessage string `json:"fault_message"`
}

// Values of enums in the spec.
const (
	actionInstanceStart = "InstanceStart"
	statePaused         = "Paused"
	stateResumed        = "Resumed"
	snapshotFull        = "Full"
	backendFile         = "File"
	infoRunning         = "Running"
	infoPaused          = "Paused"
	infoNotStarted      = "Not started"
)

// client speaks Firecracker's HTTP API on its unix socket. It holds no
// connection between calls (Firecracker's API server serves one at a time
// and a worker restart must not find it held).
type client struct {
	sock string
	hc   *http.Client
}

// callTimeout bounds one API call that does not carry its own deadline.
// Snapshot calls write or map all of guest RAM and get longer.
const (
	callTimeout     = 10 * time.Second
	snapshotTimeout = 5 * time.Minute
)

func newClient(sock string) *client {
	tr := &http.Transport{
		// The socket is in the VMM's run dir: never through a symlink.
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return jail.DialUnix(ctx, sock)
		},
		DisableKeepAlives: true,
	}
	return &client{sock: sock, hc: &http.Client{Transport: tr}}
}

// apiCallError is an answer of Firecracker's outside 2xx.
type apiCallError struct {
	Method, Path string
	Status       int
	Fault        string
}

func (e *apiCallError) Error() string {
	return fmt.Sprintf("firecracker: %s %s: %d %s", e.Method, e.Path, e.Status, e.Fault)
}

// Unwrap classes the answer: a 400 is Firecracker refusing what it was
// asked in its current state, anything else its own failure.
func (e *apiCallError) Unwrap() error {
	if e.Status == http.StatusBadRequest {
		return errdefs.ErrFailedPrecondition
	}
	return errdefs.ErrInternal
}

// do sends one request with body (nil for none) and decodes a 200 answer
// into out (nil to expect 204 No Content).
func (c *client) do(ctx context.Context, method, path string, body, out any, timeout time.Duration) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("firecracker: %s %s: %w: %v", method, path, errdefs.ErrInternal, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://localhost"+path, rd)
	if err != nil {
		return fmt.Errorf("firecracker: %s %s: %w: %v", method, path, errdefs.ErrInternal, err)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("firecracker: %s %s: %w: %v", method, path, errdefs.ErrDeadlineExceeded, err)
		}
		return fmt.Errorf("firecracker: %s %s: %w: %v", method, path, errdefs.ErrUnavailable, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("firecracker: %s %s: read answer: %w: %v", method, path, errdefs.ErrUnavailable, err)
	}
	if resp.StatusCode/100 != 2 {
		var e apiError
		if json.Unmarshal(b, &e) != nil || e.FaultMessage == "" {
			e.FaultMessage = strings.TrimSpace(string(b))
		}
		return &apiCallError{Method: method, Path: path, Status: resp.StatusCode, Fault: e.FaultMessage}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("firecracker: %s %s: decode answer: %w: %v", method, path, errdefs.ErrInternal, err)
	}
	return nil
}

func (c *client) put(ctx context.Context, path string, body any) error {
	return c.do(ctx, http.MethodPut, path, body, nil, callTimeout)
}

func (c *client) patch(ctx context.Context, path string, body any) error {
	return c.do(ctx, http.MethodPatch, path, body, nil, callTimeout)
}

// info is GET / (describeInstance).
func (c *client) info(ctx context.Context) (instanceInfo, error) {
	var i instanceInfo
	err := c.do(ctx, http.MethodGet, "/", nil, &i, callTimeout)
	return i, err
}

// await polls GET / until the API answers, ctx ends or done closes.
func (c *client) await(ctx context.Context, done <-chan struct{}) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := c.info(cctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("firecracker: api socket did not answer: %w: %v", errdefs.ErrDeadlineExceeded, err)
		case <-done:
			return fmt.Errorf("firecracker: vmm exited before its api answered: %w", errdefs.ErrUnavailable)
		case <-t.C:
		}
	}
}
