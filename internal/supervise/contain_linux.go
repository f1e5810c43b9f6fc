package supervise

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Containment is what holds a command's tree on this machine, as found by
// Probe: the strongest of
//
//   - a PID namespace (with a user namespace when fence is not root, and a
//     cgroup namespace): the shim is its first process, the command cannot
//     see or signal fence or the shim (the first process of a namespace gets
//     no signal it has no handler for from inside it, SIGKILL and SIGSTOP
//     included), no process can leave it, and when the shim ends the kernel
//     kills every process in it, every thread of each;
//   - a cgroup v2 group of its own that fence makes (under its own cgroup,
//     or under the delegated directory given with --cgroup): cgroup.kill
//     reaches every thread of every process in it and cgroup.events says
//     when it is empty;
//   - neither: subreapers and /proc walks, best effort.
type Containment struct {
	Namespace    bool
	Cgroup       bool
	CgroupParent string // "" for fence's own cgroup
	Require      bool   // never start a command without a PID namespace
	Missing      []string
	CgroupErr    error // why no cgroup could be made (nil when Cgroup, or not tried)
}

// Real says whether the command cannot reach its supervisor: the
// guarantee holds against a job that attacks fence itself.
func (c Containment) Real() bool { return c.Namespace }

// Mechanism names what holds the tree.
func (c Containment) Mechanism() string { return mechanism(c.Namespace, c.Cgroup) }

// BestEffortEscapes are the escapes left open without a PID namespace, as
// the warning at start names them.
const BestEffortEscapes = "a job that sends SIGSTOP or SIGKILL to fence and its shim both (fence and its shim both stopped or killed) runs on unsupervised, " +
	"and a job can write to fence's pipes only until the shim closes them; a job that leaves the process tree between two walks of /proc " +
	"(without a cgroup) can escape the kill"

// Warning is what fence says at start when containment is best effort.
func (c Containment) Warning() string {
	return fmt.Sprintf("containment is best effort (%s): %s; hint: run fence as root, allow unprivileged user namespaces "+
		"(sysctl user.max_user_namespaces, kernel.apparmor_restrict_unprivileged_userns), or use --require-containment to refuse to run without real containment",
		strings.Join(c.Missing, "; "), BestEffortEscapes)
}

// ProbeOptions are the operator's choices.
type ProbeOptions struct {
	Exe          string // fence's own binary
	CgroupParent string // --cgroup, or "" for fence's own cgroup
	NoNamespace  bool   // FENCE_SUPERVISE_NO_NAMESPACE=1
	NoCgroup     bool   // FENCE_SUPERVISE_NO_CGROUP=1
	Require      bool   // --require-containment
}

// Probe finds the containment this machine gives fence run, by starting
// fence's own binary (as fence __shim probe) the way the shim will be.
func Probe(o ProbeOptions) Containment {
	c := Containment{CgroupParent: o.CgroupParent, Require: o.Require}
	if o.NoNamespace {
		c.Missing = append(c.Missing, "no PID namespace: FENCE_SUPERVISE_NO_NAMESPACE=1")
	} else if err := probe(o.Exe, true, nil); err != nil {
		c.Missing = append(c.Missing, "no PID namespace: "+nsHint(err))
	} else {
		c.Namespace = true
	}
	if o.NoCgroup {
		c.Missing = append(c.Missing, "no cgroup: FENCE_SUPERVISE_NO_CGROUP=1")
		return c
	}
	cg, err := newCgroup(o.CgroupParent)
	if err == nil {
		err = probe(o.Exe, c.Namespace, cg)
		if rerr := cg.remove(time.Second); err == nil {
			err = rerr
		}
	}
	if err != nil && cg != nil && errors.Is(err, syscall.EACCES) {
		err = fmt.Errorf("%w: fence may not move a process into %s; run fence inside a cgroup below a common ancestor this user may write (cgroup.procs)", err, cg.dir)
	}
	if err != nil {
		c.CgroupErr = err
		where := "fence's own cgroup"
		if o.CgroupParent != "" {
			where = o.CgroupParent
		}
		c.Missing = append(c.Missing, fmt.Sprintf("no cgroup under %s: %v (name a delegated cgroup v2 directory with --cgroup, or run fence inside one)", where, err))
	} else {
		c.Cgroup = true
	}
	return c
}

func probe(exe string, ns bool, cg *cgroup) error {
	cmd := exec.Command(exe, ShimCommand, "probe")
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	if ns {
		nsAttr(cmd.SysProcAttr)
	}
	if cg != nil {
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(cg.fd.Fd())
	}
	// The probe is started exactly as the shim will be: fence is not
	// dumpable (cli.undumpable), and the parent can write the child's
	// uid_map only while it is (see startDumpable). Without this, every
	// unprivileged probe failed with EACCES and fence fell back to best
	// effort on machines that allow user namespaces.
	var buf strings.Builder
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := startDumpable(cmd, ns && os.Geteuid() != 0)
	if err == nil {
		err = cmd.Wait()
	}
	out := []byte(buf.String())
	if err != nil {
		if len(out) > 0 {
			return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
		}
		return err
	}
	return nil
}

func nsHint(err error) string {
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EACCES) {
		return err.Error() + " (unprivileged user namespaces are not allowed here)"
	}
	return err.Error()
}

// nsAttr makes the process a new PID namespace's first process, in a new
// cgroup namespace rooted at its cgroup (its /proc/self/cgroup shows "/";
// it stops a move out of the cgroup only where the cgroup2 mount has
// nsdelegate: the escape suite's cgroup-move scenario moved itself here,
// and the PID namespace held it), with a user namespace that maps only
// fence's own user and group when fence is not root.
func nsAttr(a *syscall.SysProcAttr) {
	a.Cloneflags |= syscall.CLONE_NEWPID
	a.Unshareflags |= syscall.CLONE_NEWCGROUP
	if uid := os.Geteuid(); uid != 0 {
		gid := os.Getegid()
		a.Cloneflags |= syscall.CLONE_NEWUSER
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
		a.GidMappingsEnableSetgroups = false
	}
}
