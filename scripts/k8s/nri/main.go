// bulkhead-nri-stub speaks NRI (the Node Resource Interface of containerd and CRI-O) for
// `bulkhead nri`, through the NRI project's own stub (github.com/containerd/nri/pkg/stub:
// ttrpc over the runtime's multiplexed unix socket, registration, the protocol's versions).
// It decides nothing: for each container being created whose pod has annotations in the
// bulkhead.io domain, it writes one JSON line with the pod's bulkhead.io annotations to
// stdout, reads the policy's answer (one JSON line) from stdin, and turns it into the
// container's adjustment, or into an error that fails the container's creation (the kubelet
// makes it an event on the pod). Pods without such annotations are never sent and never
// adjusted. `bulkhead-agent nri` starts it and answers; the allow-list, the directive parser
// and the cgroup mapping all live there (one table of directives, in Rust).
//
// The protocol is one request line, one answer line, in order: `create` (a container of such
// a pod being created; the answer is its adjustment, an error, or `post`: ask again at its
// start), `start` (a container whose creation was answered `post`, created by the runtime
// and about to start: its cgroup exists) and `remove` (such a container removed, before its
// start or after: the policy forgets what it held for it; the answer carries nothing, and an
// error in it is only logged).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

const domain = "bulkhead.io/"

// At most this many bytes in one answer line.
const maxLine = 1 << 20

type request struct {
	Seq       uint64            `json:"seq"`
	Event     string            `json:"event"`
	Namespace string            `json:"namespace"`
	Pod       string            `json:"pod"`
	UID       string            `json:"uid"`
	Container string            `json:"container"`
	ID        string            `json:"id"`
	Cgroups   string            `json:"cgroupsPath"`
	Annots    map[string]string `json:"annotations,omitempty"`
}

type answer struct {
	Seq    uint64  `json:"seq"`
	Error  string  `json:"error,omitempty"`
	Adjust *adjust `json:"adjust,omitempty"`
	// Post: the policy also wants the container's cgroup once it exists (StartContainer),
	// for what the OCI resources cannot carry (cpu.idle on a v1 node).
	Post bool `json:"post,omitempty"`
}

// At most this many containers waiting for their StartContainer; one created longer ago
// than maxAge is forgotten when room is needed (created and never started nor removed: the
// policy forgets it at the same age).
const (
	maxPosts = 4096
	maxAge   = 10 * time.Minute
)

type adjust struct {
	CPUShares         *uint64           `json:"cpuShares,omitempty"`
	CPUQuota          *int64            `json:"cpuQuota,omitempty"`
	CPUPeriod         *int64            `json:"cpuPeriod,omitempty"`
	CPUSetCPUs        *string           `json:"cpusetCpus,omitempty"`
	MemoryLimit       *int64            `json:"memoryLimit,omitempty"`
	MemoryReservation *int64            `json:"memoryReservation,omitempty"`
	PidsLimit         *int64            `json:"pidsLimit,omitempty"`
	Unified           map[string]string `json:"unified,omitempty"`
}

type plugin struct {
	pmu   sync.Mutex
	posts map[string]time.Time // container id -> when its creation was answered `post`
	mu    sync.Mutex           // one request and its answer at a time
	seq   uint64
	out   *json.Encoder
	in    *bufio.Reader
}

// hold remembers a container to ask about at its start; false when maxPosts are held even
// after forgetting those created more than maxAge ago.
func (p *plugin) hold(id string, now time.Time) bool {
	p.pmu.Lock()
	defer p.pmu.Unlock()
	if len(p.posts) >= maxPosts {
		for k, t := range p.posts {
			if now.Sub(t) >= maxAge {
				delete(p.posts, k)
			}
		}
	}
	if len(p.posts) >= maxPosts {
		return false
	}
	p.posts[id] = now
	return true
}

// release forgets a container; whether it was held.
func (p *plugin) release(id string) bool {
	p.pmu.Lock()
	defer p.pmu.Unlock()
	_, ok := p.posts[id]
	delete(p.posts, id)
	return ok
}

// forget tells the policy to drop what it holds for a container. It never fails the
// runtime's call: a failure is logged (the policy also forgets by age).
func (p *plugin) forget(pod *api.PodSandbox, ctr *api.Container) {
	a, err := p.ask(&request{
		Event: "remove", Namespace: pod.GetNamespace(), Pod: pod.GetName(), UID: pod.GetUid(),
		Container: ctr.GetName(), ID: ctr.GetId(),
	})
	if err == nil && a.Error != "" {
		err = errors.New(a.Error)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bulkhead-nri-stub: remove %s: %v\n", ctr.GetId(), err)
	}
}

func (p *plugin) ask(r *request) (*answer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq++
	r.Seq = p.seq
	if err := p.out.Encode(r); err != nil {
		return nil, fmt.Errorf("bulkhead policy gone: %w", err)
	}
	line, err := p.in.ReadSlice('\n')
	if err != nil {
		return nil, fmt.Errorf("bulkhead policy gone: %w", err)
	}
	var a answer
	if err := json.Unmarshal(line, &a); err != nil {
		return nil, fmt.Errorf("bulkhead policy: bad answer: %w", err)
	}
	if a.Seq != r.Seq {
		return nil, fmt.Errorf("bulkhead policy: answer %d to request %d", a.Seq, r.Seq)
	}
	return &a, nil
}

// Synchronize comes once the runtime accepted the registration (and again after a
// reconnect): the policy is told, which makes its readiness.
func (p *plugin) Synchronize(_ context.Context, _ []*api.PodSandbox, _ []*api.Container) ([]*api.ContainerUpdate, error) {
	a, err := p.ask(&request{Event: "synchronized"})
	if err == nil && a.Error != "" {
		err = errors.New(a.Error)
	}
	return nil, err
}

func (p *plugin) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	annots := map[string]string{}
	for k, v := range pod.GetAnnotations() {
		if strings.HasPrefix(k, domain) {
			annots[k] = v
		}
	}
	if len(annots) == 0 {
		return nil, nil, nil
	}
	a, err := p.ask(&request{
		Event: "create", Namespace: pod.GetNamespace(), Pod: pod.GetName(), UID: pod.GetUid(),
		Container: ctr.GetName(), ID: ctr.GetId(), Cgroups: ctr.GetLinux().GetCgroupsPath(),
		Annots: annots,
	})
	if err != nil {
		return nil, nil, err
	}
	if a.Error != "" {
		return nil, nil, errors.New(a.Error)
	}
	if a.Post && !p.hold(ctr.GetId(), time.Now()) {
		p.forget(pod, ctr)
		return nil, nil, errors.New("bulkhead: too many containers being created at once")
	}
	return a.Adjust.apply(), nil, nil
}

// StartContainer: the runtime has created the container (runc create: its cgroup exists)
// and not started it yet; an error fails the start.
func (p *plugin) StartContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	if !p.release(ctr.GetId()) {
		return nil
	}
	a, err := p.ask(&request{
		Event: "start", Namespace: pod.GetNamespace(), Pod: pod.GetName(), UID: pod.GetUid(),
		Container: ctr.GetName(), ID: ctr.GetId(), Cgroups: ctr.GetLinux().GetCgroupsPath(),
	})
	if err != nil {
		return err
	}
	if a.Error != "" {
		return errors.New(a.Error)
	}
	return nil
}

// RemoveContainer: forget a container that never got to StartContainer, here and in the
// policy.
func (p *plugin) RemoveContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	if p.release(ctr.GetId()) {
		p.forget(pod, ctr)
	}
	return nil
}

func (j *adjust) apply() *api.ContainerAdjustment {
	if j == nil {
		return nil
	}
	adj := &api.ContainerAdjustment{}
	if j.CPUShares != nil {
		adj.SetLinuxCPUShares(*j.CPUShares)
	}
	if j.CPUQuota != nil {
		adj.SetLinuxCPUQuota(*j.CPUQuota)
	}
	if j.CPUPeriod != nil {
		adj.SetLinuxCPUPeriod(*j.CPUPeriod)
	}
	if j.CPUSetCPUs != nil {
		adj.SetLinuxCPUSetCPUs(*j.CPUSetCPUs)
	}
	if j.MemoryLimit != nil {
		adj.SetLinuxMemoryLimit(*j.MemoryLimit)
	}
	if j.MemoryReservation != nil {
		adj.SetLinuxMemoryReservation(*j.MemoryReservation)
	}
	if j.PidsLimit != nil {
		adj.SetLinuxPidLimits(*j.PidsLimit)
	}
	for k, v := range j.Unified {
		adj.AddLinuxUnified(k, v)
	}
	return adj
}

func main() {
	socket := flag.String("socket", api.DefaultSocketPath, "the runtime's NRI socket")
	name := flag.String("name", "bulkhead", "plugin name")
	idx := flag.String("idx", "50", "plugin index (order among plugins)")
	flag.Parse()
	p := &plugin{
		posts: map[string]time.Time{},
		out:   json.NewEncoder(os.Stdout),
		in:    bufio.NewReaderSize(os.Stdin, maxLine),
	}
	s, err := stub.New(p, stub.WithPluginName(*name), stub.WithPluginIdx(*idx),
		stub.WithSocketPath(*socket), stub.WithOnClose(func() {
			fmt.Fprintln(os.Stderr, "bulkhead-nri-stub: the runtime closed the connection")
			os.Exit(1)
		}))
	if err != nil {
		fmt.Fprintf(os.Stderr, "bulkhead-nri-stub: %v\n", err)
		os.Exit(1)
	}
	// The policy (our parent) gone ends the plugin.
	go func(parent int) {
		for range time.Tick(time.Second) {
			if os.Getppid() != parent {
				fmt.Fprintln(os.Stderr, "bulkhead-nri-stub: the policy process is gone")
				os.Exit(1)
			}
		}
	}(os.Getppid())
	if err := s.Run(context.Background()); err != nil {
		fmt.Fprintf(os.Stderr, "bulkhead-nri-stub: %v\n", err)
		os.Exit(1)
	}
}
