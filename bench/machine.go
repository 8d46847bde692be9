package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Machine describes where a run took place, for the report.
type Machine struct {
	CPU       string  `json:"cpu"`
	Cores     int     `json:"cores"`
	MemoryGiB float64 `json:"memory_gib"`
	Kernel    string  `json:"kernel"`
	Go        string  `json:"go"`
	OS        string  `json:"os_arch"`
	// TempDir is where the stores lived; Device, FS and MountOptions
	// describe its filesystem, Disk the block device under it.
	TempDir      string `json:"temp_dir"`
	Device       string `json:"device"`
	FS           string `json:"fs"`
	MountOptions string `json:"mount_options"`
	Disk         string `json:"disk"`
	// LoadStart and LoadEnd are the 1-minute load averages when the run
	// started and ended: other work on the machine skews the figures.
	LoadStart string    `json:"load_start"`
	LoadEnd   string    `json:"load_end,omitempty"`
	Date      time.Time `json:"date"`
	// Library is the commit of the idem checkout the suite was built
	// against (the parent directory), with "+ uncommitted changes" when
	// its tracked files differ from it.
	Library string `json:"library,omitempty"`
}

// describeMachine reads /proc and /sys; what it cannot read stays empty.
func describeMachine(tmp string) Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH,
		TempDir: tmp, Date: time.Now().UTC(), LoadStart: loadAvg()}
	m.CPU = firstField("/proc/cpuinfo", "model name")
	if kb, err := strconv.ParseFloat(strings.Fields(firstField("/proc/meminfo", "MemTotal") + " 0")[0], 64); err == nil {
		m.MemoryGiB = kb / (1 << 20)
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	m.Device, m.FS, m.MountOptions = mountOf(tmp)
	m.Disk = diskOf(m.Device)
	m.Library = libraryRevision()
	return m
}

// libraryRevision describes the git checkout of the library in the
// parent directory, or returns "" when there is none (or no git).
func libraryRevision() string {
	mod, err := os.ReadFile("../go.mod")
	if err != nil || !bytes.HasPrefix(mod, []byte("module github.com/idemkit/idem\n")) {
		return ""
	}
	// The last commit that changed the library, not the benchmarks.
	out, err := exec.Command("git", "-C", "..", "log", "-1", "--format=%h %s", "--", ".", ":!bench").Output()
	if err != nil {
		return ""
	}
	rev := strings.TrimSpace(string(out))
	if len(rev) > 80 {
		rev = rev[:77] + "..."
	}
	if st, err := exec.Command("git", "-C", "..", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		rev += " + uncommitted changes"
	}
	return rev
}

// firstField returns the value of the first "name : value" line of a
// /proc file.
func firstField(path, name string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == name {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	return strings.Fields(string(b))[0]
}

// mountOf returns the device, filesystem type and options of the mount
// holding path: the longest mount point that prefixes it.
func mountOf(path string) (dev, fs, opts string) {
	if p, err := filepath.EvalSymlinks(path); err == nil {
		path = p
	}
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return
	}
	best := -1
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		mp := f[1]
		if (path == mp || strings.HasPrefix(path, strings.TrimSuffix(mp, "/")+"/")) && len(mp) > best {
			best, dev, fs, opts = len(mp), f[0], f[2], f[3]
		}
	}
	return
}

// diskOf describes the block device behind dev from /sys: its model if
// it tells one, whether it rotates, and its size.
func diskOf(dev string) string {
	name := filepath.Base(dev)
	sys := "/sys/class/block/" + name
	if _, err := os.Stat(sys); err != nil {
		return ""
	}
	// A partition's queue and model are its parent's.
	if real, err := filepath.EvalSymlinks(sys); err == nil {
		if _, err := os.Stat(filepath.Join(real, "partition")); err == nil {
			sys = filepath.Dir(real)
		}
	}
	read := func(p string) string {
		b, _ := os.ReadFile(filepath.Join(sys, p))
		return strings.TrimSpace(string(b))
	}
	var parts []string
	if model := read("device/model"); model != "" {
		parts = append(parts, model)
	}
	switch read("queue/rotational") {
	case "0":
		parts = append(parts, "non-rotational")
	case "1":
		parts = append(parts, "rotational (as the kernel reports it)")
	}
	if sectors, err := strconv.ParseFloat(read("size"), 64); err == nil {
		parts = append(parts, strconv.FormatFloat(sectors*512/(1<<30), 'f', 0, 64)+" GiB")
	}
	if strings.HasPrefix(name, "vd") {
		parts = append(parts, "virtio block device (a virtual machine's disk)")
	}
	return strings.Join(parts, ", ")
}
