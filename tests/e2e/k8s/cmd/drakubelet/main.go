// Command drakubelet is the kubelet side of DRA, without the rest of kubelet.
//
// It runs kubelet's own DRA manager (k8s.io/kubernetes/pkg/kubelet/cm/dra) and
// plugin manager (k8s.io/kubernetes/pkg/kubelet/pluginmanager) against a real
// API server, so a DRA driver under test sees the same registration,
// NodePrepareResources and NodeUnprepareResources calls that kubelet makes.
//
// It watches the pods bound to --node-name. For every pod it calls
// PrepareResources once and then GetResources per container; when the pod is
// deleted (or reaches a terminal phase) it calls UnprepareResources. Failed
// calls are retried with exponential backoff, as kubelet's pod workers do.
//
// Every observable step is one JSON object per line on stdout (see event).
// Logs go to stderr (klog flags such as -v apply).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"sync"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	pluginregistration "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"
	plugincache "k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"
)

// event is one line of output. Fields that do not apply are omitted.
type event struct {
	Event         string    `json:"event"`
	Driver        string    `json:"driver,omitempty"`
	Endpoint      string    `json:"endpoint,omitempty"`
	Versions      []string  `json:"versions,omitempty"`
	Node          string    `json:"node,omitempty"`
	Namespace     string    `json:"namespace,omitempty"`
	Pod           string    `json:"pod,omitempty"`
	UID           string    `json:"uid,omitempty"`
	Container     string    `json:"container,omitempty"`
	InitContainer bool      `json:"initContainer,omitempty"`
	CDIDevices    *[]string `json:"cdiDevices,omitempty"` // set on "prepared" only, [] when none
	PodUIDs       []string  `json:"podUIDs,omitempty"`
	Op            string    `json:"op,omitempty"`
	Error         string    `json:"error,omitempty"`
	Retry         int       `json:"retry,omitempty"`
}

// emitter writes events as JSON lines; one lock keeps lines whole.
type emitter struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (e *emitter) emit(ev event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	_ = e.enc.Encode(ev)
}

// handler wraps the DRA manager's plugin handler to report registrations.
type handler struct {
	inner    plugincache.PluginHandler
	out      *emitter
	onChange func()
}

func (h *handler) ValidatePlugin(ctx context.Context, name, endpoint string, versions []string) error {
	err := h.inner.ValidatePlugin(ctx, name, endpoint, versions)
	if err != nil {
		h.out.emit(event{Event: "error", Op: "validate", Driver: name, Endpoint: endpoint, Versions: versions, Error: err.Error()})
	}
	return err
}

func (h *handler) RegisterPlugin(ctx context.Context, name, endpoint string, versions []string, timeout *time.Duration) error {
	err := h.inner.RegisterPlugin(ctx, name, endpoint, versions, timeout)
	if err != nil {
		h.out.emit(event{Event: "error", Op: "register", Driver: name, Endpoint: endpoint, Versions: versions, Error: err.Error()})
		return err
	}
	h.out.emit(event{Event: "registered", Driver: name, Endpoint: endpoint, Versions: versions})
	h.onChange()
	return nil
}

func (h *handler) DeRegisterPlugin(ctx context.Context, name, endpoint string) {
	h.inner.DeRegisterPlugin(ctx, name, endpoint)
	h.out.emit(event{Event: "deregistered", Driver: name, Endpoint: endpoint})
}

// podState is what the harness remembers about one pod name.
type podState struct {
	pod        *v1.Pod // last seen version
	prepared   bool
	unprepared bool
}

type harness struct {
	ctx        context.Context
	client     kubernetes.Interface
	manager    *dra.Manager
	lister     corelisters.PodLister
	queue      workqueue.TypedRateLimitingInterface[string]
	out        *emitter
	finalize   bool
	maxRetries int

	mu     sync.Mutex
	states map[string]*podState
}

func terminal(pod *v1.Pod) bool {
	return pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed
}

// activePods is what kubelet's pod manager would report: pods bound here
// that are neither terminating nor finished.
func (h *harness) activePods() []*v1.Pod {
	pods, err := h.lister.List(labels.Everything())
	if err != nil {
		return nil
	}
	active := make([]*v1.Pod, 0, len(pods))
	for _, p := range pods {
		if p.DeletionTimestamp == nil && !terminal(p) {
			active = append(active, p)
		}
	}
	return active
}

func (h *harness) enqueueAll() {
	h.mu.Lock()
	keys := make([]string, 0, len(h.states))
	for k, st := range h.states {
		if !st.prepared {
			keys = append(keys, k)
		}
	}
	h.mu.Unlock()
	for _, k := range keys {
		h.queue.Forget(k)
		h.queue.Add(k)
	}
}

func (h *harness) state(key string) *podState {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.states[key]
	if st == nil {
		st = &podState{}
		h.states[key] = st
	}
	return st
}

func (h *harness) drop(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.states, key)
}

func (h *harness) fail(op string, pod *v1.Pod, key string, err error) error {
	h.out.emit(event{Event: "error", Op: op, Namespace: pod.Namespace, Pod: pod.Name, UID: string(pod.UID),
		Error: err.Error(), Retry: h.queue.NumRequeues(key) + 1})
	return err
}

func (h *harness) unprepare(key string, pod *v1.Pod, st *podState) error {
	if err := h.manager.UnprepareResources(h.ctx, pod); err != nil {
		return h.fail("unprepare", pod, key, err)
	}
	st.unprepared = true
	h.out.emit(event{Event: "unprepared", Namespace: pod.Namespace, Pod: pod.Name, UID: string(pod.UID)})
	return nil
}

// sync brings one pod name to its desired state. An error means "retry later".
func (h *harness) sync(key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := h.lister.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		pod = nil
	} else if err != nil {
		return err
	}
	st := h.state(key)

	// The pod we knew is gone or was replaced by a pod with the same name.
	if st.pod != nil && (pod == nil || pod.UID != st.pod.UID) {
		if !st.unprepared {
			if err := h.unprepare(key, st.pod, st); err != nil {
				return err
			}
		}
		h.drop(key)
		st = h.state(key)
	}
	if pod == nil {
		h.drop(key)
		return nil
	}
	st.pod = pod

	if pod.DeletionTimestamp != nil || terminal(pod) {
		if !st.unprepared {
			if err := h.unprepare(key, pod, st); err != nil {
				return err
			}
		}
		if pod.DeletionTimestamp != nil && h.finalize {
			// What kubelet's status manager does once all containers are
			// gone: remove the pod object for good.
			zero := int64(0)
			uid := pod.UID
			err := h.client.CoreV1().Pods(ns).Delete(h.ctx, name, metav1.DeleteOptions{
				GracePeriodSeconds: &zero,
				Preconditions:      &metav1.Preconditions{UID: &uid},
			})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return h.fail("delete", pod, key, err)
			}
		}
		return nil
	}

	if st.prepared {
		return nil
	}
	if err := h.manager.PrepareResources(h.ctx, pod); err != nil {
		return h.fail("prepare", pod, key, err)
	}
	var lines []event
	emitFor := func(containers []v1.Container, init bool) error {
		for i := range containers {
			c := &containers[i]
			info, err := h.manager.GetResources(pod, c)
			if err != nil {
				return fmt.Errorf("container %s: %w", c.Name, err)
			}
			ids := make([]string, 0, len(info.CDIDevices))
			for _, d := range info.CDIDevices {
				ids = append(ids, d.Name)
			}
			lines = append(lines, event{Event: "prepared", Namespace: pod.Namespace, Pod: pod.Name,
				UID: string(pod.UID), Container: c.Name, InitContainer: init, CDIDevices: &ids})
		}
		return nil
	}
	if err := emitFor(pod.Spec.InitContainers, true); err != nil {
		return h.fail("get-resources", pod, key, err)
	}
	if err := emitFor(pod.Spec.Containers, false); err != nil {
		return h.fail("get-resources", pod, key, err)
	}
	st.prepared = true
	st.unprepared = false
	for _, ev := range lines {
		h.out.emit(ev)
	}
	return nil
}

func (h *harness) worker() {
	for {
		key, quit := h.queue.Get()
		if quit {
			return
		}
		err := h.sync(key)
		switch {
		case err == nil:
			h.queue.Forget(key)
		case h.maxRetries > 0 && h.queue.NumRequeues(key) >= h.maxRetries:
			klog.FromContext(h.ctx).Error(err, "Giving up on pod", "pod", key)
			h.queue.Forget(key)
		default:
			h.queue.AddRateLimited(key)
		}
		h.queue.Done(key)
	}
}

func main() {
	os.Exit(run())
}

func run() int {
	fs := flag.NewFlagSet("drakubelet", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the API server (required; defaults to $KUBECONFIG)")
	nodeName := fs.String("node-name", os.Getenv("NODE_NAME"), "act as the kubelet of this node (required; defaults to $NODE_NAME)")
	registryDir := fs.String("registry-dir", "/var/lib/kubelet/plugins_registry", "directory watched for plugin registration sockets")
	stateDir := fs.String("state-dir", "", "directory for the DRA manager's checkpoint files (required)")
	finalize := fs.Bool("finalize-deletion", true, "after unpreparing a pod that is being deleted, delete it with grace period 0 as kubelet would")
	workers := fs.Int("workers", 4, "pods handled in parallel")
	backoffBase := fs.Duration("backoff-base", 500*time.Millisecond, "first retry delay after a failed call")
	backoffMax := fs.Duration("backoff-max", 30*time.Second, "longest retry delay")
	maxRetries := fs.Int("max-retries", 0, "give up on a pod after this many failures (0: never)")
	featureGates := fs.String("feature-gates", "", "kubelet feature gates, e.g. DRAExtendedResource=true")
	klog.InitFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: drakubelet --kubeconfig FILE --node-name NODE --state-dir DIR [--registry-dir DIR] [flags]\n\n"+
			"Runs kubelet's DRA manager and plugin watcher for one node and prints one JSON event per line on stdout:\n"+
			"  ready, registered, deregistered, prepared (one per container), unprepared, health, error.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *kubeconfig == "" || *nodeName == "" || *stateDir == "" {
		fmt.Fprintln(os.Stderr, "drakubelet: --kubeconfig, --node-name and --state-dir are required")
		return 2
	}
	if *featureGates != "" {
		if err := utilfeature.DefaultMutableFeatureGate.Set(*featureGates); err != nil {
			fmt.Fprintf(os.Stderr, "drakubelet: --feature-gates: %v\n", err)
			return 2
		}
	}
	for _, d := range []string{*registryDir, *stateDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			fmt.Fprintf(os.Stderr, "drakubelet: %v\n", err)
			return 1
		}
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	logger := klog.Background()
	ctx = klog.NewContext(ctx, logger)
	out := &emitter{enc: json.NewEncoder(os.Stdout)}

	restConfig, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintf(os.Stderr, "drakubelet: kubeconfig: %v\n", err)
		return 2
	}
	restConfig.UserAgent = "drakubelet/" + *nodeName
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		fmt.Fprintf(os.Stderr, "drakubelet: %v\n", err)
		return 2
	}

	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", *nodeName).String()
		}))
	podInformer := factory.Core().V1().Pods()

	manager, err := dra.NewManager(logger, client, *stateDir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "drakubelet: DRA manager: %v\n", err)
		return 1
	}

	h := &harness{
		ctx:    ctx,
		client: client,
		lister: podInformer.Lister(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](*backoffBase, *backoffMax),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "pods"}),
		out:        out,
		finalize:   *finalize,
		maxRetries: *maxRetries,
		manager:    manager,
		states:     map[string]*podState{},
	}

	sourcesReady := config.NewSourcesReady(func(sets.Set[string]) bool { return true })
	getNode := func(ctx context.Context) (*v1.Node, error) {
		return client.CoreV1().Nodes().Get(ctx, *nodeName, metav1.GetOptions{})
	}
	if err := manager.Start(ctx, h.activePods, getNode, sourcesReady); err != nil {
		fmt.Fprintf(os.Stderr, "drakubelet: start DRA manager: %v\n", err)
		return 1
	}
	defer manager.Stop()

	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case u := <-manager.Updates():
				uids := append([]string(nil), u.PodUIDs...)
				sort.Strings(uids)
				out.emit(event{Event: "health", PodUIDs: uids})
			}
		}
	}()

	enqueue := func(obj any) {
		key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
		if err == nil {
			h.queue.Add(key)
		}
	}
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		fmt.Fprintf(os.Stderr, "drakubelet: %v\n", err)
		return 1
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), podInformer.Informer().HasSynced) {
		fmt.Fprintln(os.Stderr, "drakubelet: pod informer did not sync")
		return 1
	}

	pm := pluginmanager.NewPluginManager(*registryDir, &record.FakeRecorder{})
	pm.AddHandler(pluginregistration.DRAPlugin, &handler{inner: manager.GetWatcherHandler(), out: out, onChange: h.enqueueAll})
	go pm.Run(ctx, sourcesReady, ctx.Done())

	var wg sync.WaitGroup
	for i := 0; i < *workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.worker()
		}()
	}
	out.emit(event{Event: "ready", Node: *nodeName})

	<-ctx.Done()
	h.queue.ShutDown()
	wg.Wait()
	factory.Shutdown()
	return 0
}

// Compile-time check that the wrapper satisfies the plugin manager's interface.
var _ plugincache.PluginHandler = &handler{}
