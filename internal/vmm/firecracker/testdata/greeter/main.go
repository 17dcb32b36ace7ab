// Command greeter is /init of the test guest the conformance suite boots in
// a real Firecracker (vmmtest.Guest): it loads the kernel modules packed
// next to it, then, on every vsock connection to the agent's port, writes
// vmmtest.BusyboxGreeting lines with /dev/vda's size, as vmmtest's busybox
// guest does on the virtio-serial port (busybox cannot speak vsock).
package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/space-sandbox/space/internal/agent"
	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/vmm/vmmtest"
)

func main() {
	_ = os.MkdirAll("/proc", 0o755)
	_ = os.MkdirAll("/sys", 0o755)
	_ = os.MkdirAll("/dev", 0o755)
	_ = unix.Mount("proc", "/proc", "proc", 0, "")
	_ = unix.Mount("sys", "/sys", "sysfs", 0, "")
	_ = unix.Mount("dev", "/dev", "devtmpfs", 0, "")
	mods, _ := filepath.Glob("/lib/mod/*.ko")
	sort.Strings(mods) // named NN-name.ko in dependency order
	for _, m := range mods {
		f, err := os.Open(m)
		if err == nil {
			err = unix.FinitModule(int(f.Fd()), "", 0)
			f.Close()
		}
		if err != nil && err != unix.EEXIST {
			fmt.Printf("greeter: load %s: %v\n", filepath.Base(m), err)
		}
	}
	vda := "none"
	if b, err := os.ReadFile("/sys/block/vda/size"); err == nil {
		vda = strings.TrimSpace(string(b))
	}
	var l net.Listener
	var err error
	for i := 0; i < 100; i++ { // the vsock transport binds asynchronously
		if l, err = agent.ListenVsock(agentproto.VsockPort); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		fmt.Println("greeter: no vsock:", err)
		_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
		return
	}
	fmt.Printf("greeter: listening on vsock port %d, vda=%s\n", agentproto.VsockPort, vda)
	for {
		c, err := l.Accept()
		if err != nil {
			continue
		}
		go func() {
			defer c.Close()
			for n := 1; ; n++ {
				if _, err := fmt.Fprintf(c, "%s vda=%s seq=%d\n", vmmtest.BusyboxGreeting, vda, n); err != nil {
					return
				}
				time.Sleep(time.Second)
			}
		}()
	}
}
