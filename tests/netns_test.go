package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corgifs/corgifs/corgifstest"
	"github.com/corgifs/corgifs/internal/testenv"
	"github.com/minio/minio-go/v7"
)

// netLab is a set of network namespaces joined by veth pairs to a bridge in
// a hub namespace: node i has 10.77.0.(10+i)/24 on its interface cg0, the
// S3 server's namespace 10.77.0.1. The addresses exist only inside those
// namespaces; the host's network is not touched.
type netLab struct {
	t      *testing.T
	prefix string   // of every namespace's name: cgfs-<pid>-
	names  []string // created so far, deleted at the end
}

const (
	labS3Addr = "10.77.0.1"
	labIface  = "cg0"
)

func labNodeAddr(i int) string { return fmt.Sprintf("10.77.0.%d", 10+i) }

// run runs a command that sets up the lab and fails the test with its
// output when it fails.
func (l *netLab) run(argv ...string) {
	l.t.Helper()
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		l.t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
}

// newNetLab makes the hub and the namespaces "s3" and "n0".."n<nodes-1>".
// The namespaces are deleted when the test ends, failed or not; namespaces
// left by an earlier test binary that was killed (its pid gone) are
// deleted first, so that a crash does not pile them up.
func newNetLab(t *testing.T, nodes int) *netLab {
	t.Helper()
	for _, tool := range []string{"ip", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Missing(t, "no %s on PATH (Debian: apt-get install iproute2 util-linux)", tool)
		}
	}
	if os.Geteuid() != 0 {
		testenv.Missing(t, "network namespaces need root (ip netns add)")
	}
	removeStaleLabs(t)
	l := &netLab{t: t, prefix: fmt.Sprintf("cgfs-%d-", os.Getpid())}
	t.Cleanup(l.remove)
	hub := l.add("hub")
	l.run("ip", "-n", hub, "link", "add", "br0", "type", "bridge")
	l.run("ip", "-n", hub, "link", "set", "br0", "up")
	join := func(name, addr string, k int) {
		ns := l.add(name)
		peer := fmt.Sprintf("h%d", k)
		l.run("ip", "link", "add", labIface, "netns", ns, "type", "veth", "peer", "name", peer, "netns", hub)
		l.run("ip", "-n", hub, "link", "set", peer, "master", "br0", "up")
		l.run("ip", "-n", ns, "addr", "add", addr+"/24", "dev", labIface)
		l.run("ip", "-n", ns, "link", "set", labIface, "up")
		l.run("ip", "-n", ns, "link", "set", "lo", "up")
	}
	join("s3", labS3Addr, 0)
	for i := range nodes {
		join(fmt.Sprintf("n%d", i), labNodeAddr(i), i+1)
	}
	return l
}

func (l *netLab) add(name string) string {
	l.t.Helper()
	ns := l.prefix + name
	l.run("ip", "netns", "add", ns)
	l.names = append(l.names, ns)
	return ns
}

// ns is the full name of the lab's namespace name.
func (l *netLab) ns(name string) string { return l.prefix + name }

// in returns argv run in namespace name's network. nsenter --net, not ip
// netns exec: ip netns exec also unshares the mount namespace (to remount
// /sys), so a FUSE mount made under it would be invisible to the test and
// to the trainer, each in a mount namespace of its own.
func (l *netLab) in(name string, argv ...string) []string {
	return append([]string{"nsenter", "--net=/run/netns/" + l.ns(name)}, argv...)
}

// remove deletes the namespaces (their veths go with them).
func (l *netLab) remove() {
	for _, ns := range l.names {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			l.t.Errorf("ip netns del %s: %v\n%s", ns, err, out)
		}
	}
}

func removeStaleLabs(t *testing.T) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatalf("ip netns list: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "cgfs-") {
			continue
		}
		pid, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(f[0], "cgfs-"), "-", 2)[0])
		if err != nil || syscall.Kill(pid, 0) == nil {
			continue // not ours, or its test binary still runs
		}
		exec.Command("ip", "netns", "del", f[0]).Run()
	}
}

// startLabS3 serves the dataset src as s3://data/train and an empty bucket
// coord from versitygw in the lab's s3 namespace, and points the AWS_*
// environment (inherited by the daemons) at it. The objects are put by a
// versitygw on 127.0.0.1 first (the test has no address in the lab), then
// the same posix directory is served inside the lab.
func startLabS3(t *testing.T, l *netLab, src string) (dir, endpoint string) {
	t.Helper()
	s := startS3(t)
	s.upload("data", "train", src)
	if err := s.client.MakeBucket(context.Background(), "coord", minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	s.kill()
	addr := labS3Addr + ":7070"
	argv := l.in("s3", s.gw, "--port", addr, "--access", s3Access, "--secret", s3Secret, "--quiet", "posix", s.dir)
	cmd := exec.Command(argv[0], argv[1:]...)
	var log syncBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// Ready when node 0's namespace reaches it through the bridge.
	deadline := time.Now().Add(30 * time.Second)
	for {
		probe := l.in("n0", "bash", "-c", ": </dev/tcp/"+labS3Addr+"/7070")
		if exec.Command(probe[0], probe[1:]...).Run() == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("versitygw in namespace %s does not answer on %s from %s:\n%s", l.ns("s3"), addr, l.ns("n0"), log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	endpoint = "http://" + addr
	t.Setenv("AWS_ENDPOINT_URL", endpoint)
	return s.dir, endpoint
}

// ddpEpoch is one epoch of one rank's report (tests/testdata/ddp_cdgrab.py).
type ddpEpoch struct {
	IDs  []int32 `json:"ids"`
	Loss float64 `json:"loss"`
}

// trainLab mounts s3://data/train on every node of the lab (rank i in
// namespace n<i>) and runs one gloo rank of ddp_cdgrab.py per node in
// the same namespace, rendezvous at node 0's address. With coordinate,
// the daemons coordinate there with --feedback-timeout timeout. It returns each
// rank's epochs and the daemons.
func trainLab(t *testing.T, l *netLab, nodes, epochs int, seed, strategy, coordinate, timeout string, trainerArgs ...string) ([][]ddpEpoch, []*corgifstest.Daemon) {
	t.Helper()
	began := time.Now()
	ds := make([]*corgifstest.Daemon, nodes)
	errs := make([]error, nodes)
	var wg sync.WaitGroup
	for i := range nodes {
		// --index full: the trainers take len() of their part (the record
		// counts), which a probed index learns only as blocks load.
		args := []string{"--seed", seed, "--block-size", "8KiB", "--buffer", "10%", "--index", "full"}
		if coordinate != "" {
			args = append(args, "--coordinate", coordinate, "--coordinate-rank", strconv.Itoa(i),
				"--feedback-dim", "19", "--feedback-timeout", timeout)
		}
		ds[i] = corgifstest.Mount(t, "s3://data/train", corgifstest.Wrapper(l.in(fmt.Sprintf("n%d", i))...),
			corgifstest.Strategy(strategy), corgifstest.Parts(nodes), corgifstest.Args(args...))
	}
	out := t.TempDir()
	logs := make([]bytes.Buffer, nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for i := range nodes {
		argv := l.in(fmt.Sprintf("n%d", i), python, "testdata/ddp_cdgrab.py", ds[i].Dir,
			filepath.Join(out, fmt.Sprintf("rank%d.json", i)), strconv.Itoa(epochs))
		argv = append(argv, trainerArgs...)
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), "PYTHONPATH=../python", "PYTHONDONTWRITEBYTECODE=1", "OMP_NUM_THREADS=1",
			"MASTER_ADDR="+labNodeAddr(0), "MASTER_PORT=29500", "RANK="+strconv.Itoa(i), "WORLD_SIZE="+strconv.Itoa(nodes),
			// gloo binds to the address of this interface (the host
			// name would resolve to one outside the namespace).
			"GLOO_SOCKET_IFNAME="+labIface)
		cmd.Stdout, cmd.Stderr = &logs[i], &logs[i]
		wg.Go(func() { errs[i] = cmd.Run() })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d in %s: %v\n%s\ndaemon log:\n%s", i, l.ns(fmt.Sprintf("n%d", i)), err, logs[i].String(), ds[i].Log())
		}
	}
	t.Logf("%s run of %d nodes, %d epochs: %.1fs (mounts and training)", strategy, nodes, epochs, time.Since(began).Seconds())
	reports := make([][]ddpEpoch, nodes)
	for i := range nodes {
		b, err := os.ReadFile(filepath.Join(out, fmt.Sprintf("rank%d.json", i)))
		if err != nil {
			t.Fatal(err)
		}
		var r struct{ Epochs []ddpEpoch }
		if err := json.Unmarshal(b, &r); err != nil || len(r.Epochs) != epochs {
			t.Fatalf("rank %d report (%v): %d epochs, want %d", i, err, len(r.Epochs), epochs)
		}
		reports[i] = r.Epochs
	}
	return reports, ds
}

// eachEpochOnce is the independent checker: the ids the trainers consumed
// in each epoch, across the ranks, are every record exactly once.
func eachEpochOnce(t *testing.T, reports [][]ddpEpoch, records int) {
	t.Helper()
	for e := range reports[0] {
		parts := make([][]int32, len(reports))
		for r := range reports {
			parts[r] = reports[r][e].IDs
		}
		onceEach(t, fmt.Sprintf("epoch %d consumed by the %d trainers", e, len(reports)), parts, records)
	}
}

func losses(reports [][]ddpEpoch) []float64 {
	var l []float64
	for _, e := range reports[0] {
		l = append(l, e.Loss)
	}
	return l
}

// Four nodes, each its own network namespace with one corgifs daemon and
// one gloo rank, reach the S3 server in a fifth namespace and rendezvous
// over the namespaces' bridge. With --strategy cdgrab and --coordinate
// s3://coord/..., every epoch is decided once and balanced (0 fallbacks on
// every node), every node serves the decision's digest, the trainers
// consume every record exactly once per epoch, and the full-training loss
// is below D-RR's (--strategy local, each part keeps its records) at equal
// epochs. Then with rank 3 never writing its feedback of epoch 1, epoch 2
// is one fallback decision (balanced=false) that every node follows.
func TestMultiNodeCDGraBThroughNetworkNamespacesTrainsBetterThanDRRWithOneDecisionPerEpoch(t *testing.T) {
	fuseOK(t)
	torchOK(t)
	const nodes, epochs, records = 4, 3, 8000
	seed := "1"
	if s := os.Getenv("CORGIFS_NETNS_SEED"); s != "" {
		seed = s // VALIDATION.md's runs over seeds
	}
	l := newNetLab(t, nodes)
	src := genSynthetic(t, records, 18, 2, 8, "clustered", "--noise", "3")
	s3dir, _ := startLabS3(t, l, src)
	start := time.Now()

	// A timeout far above a step's time: a balanced run must never fall
	// back on a loaded machine. The late run's is short, as it is waited.
	cd, cdNodes := trainLab(t, l, nodes, epochs, seed, "cdgrab", "s3://coord/run-1", "30s", "--feedback")
	eachEpochOnce(t, cd, records)
	shared := sharedDir(filepath.Join(s3dir, "coord", "run-1"))
	for e := 1; e < epochs; e++ {
		if d := sameDigests(t, shared, e, nodes, nodes); !d.Balanced || d.Rank != 0 {
			t.Errorf("cdgrab epoch %d: decision %+v, want balanced by rank 0", e, d)
		}
	}
	for i, d := range cdNodes {
		if n := fallbacks(t, d); n != 0 {
			t.Errorf("cdgrab node %d: %d fallbacks, want 0\n%s", i, n, d.Log())
		}
	}

	drr, _ := trainLab(t, l, nodes, epochs, seed, "local", "", "")
	eachEpochOnce(t, drr, records)
	cdLoss, drrLoss := losses(cd), losses(drr)
	t.Logf("seed %s full-training loss per epoch: cdgrab %.4f, D-RR (local) %.4f", seed, cdLoss, drrLoss)
	for e := 1; e < epochs; e++ {
		if !(cdLoss[e] < drrLoss[e]) {
			t.Errorf("epoch %d: cdgrab's full-training loss %.4f is not below D-RR's %.4f", e, cdLoss[e], drrLoss[e])
		}
	}

	late, lateNodes := trainLab(t, l, nodes, epochs, seed, "cdgrab", "s3://coord/run-late", "5s", "--feedback", "--late-epoch", "1")
	eachEpochOnce(t, late, records)
	shared = sharedDir(filepath.Join(s3dir, "coord", "run-late"))
	for e := 1; e < epochs; e++ {
		d := sameDigests(t, shared, e, nodes, nodes)
		if want := e != 2; d.Balanced != want {
			t.Errorf("late run, epoch %d: decision %+v, want balanced=%v (rank 3 wrote no feedback of epoch 1)", e, d, want)
		}
	}
	for i, d := range lateNodes {
		if n := fallbacks(t, d); n != 1 {
			t.Errorf("late run, node %d: %d fallbacks, want 1 (every node follows the one fallback decision)\n%s", i, n, d.Log())
		}
	}
	t.Logf("three 4-node runs of %d epochs: %.1fs", epochs, time.Since(start).Seconds())
}
