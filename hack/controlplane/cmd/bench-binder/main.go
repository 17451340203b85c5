// Command bench-binder is the trivial binder behind bench.run's ceiling runs.
//
// It does the API work a scheduler must do for each pod and nothing else: it
// watches the pending pods of one scheduler name in one namespace and, for
// each, posts a Binding to the next node in turn and the events.k8s.io/v1
// "Scheduled" Event kube-scheduler writes, with -concurrency pods in flight.
// No filtering, no scoring, no client-side rate limit. It speaks protobuf
// through client-go, as kube-scheduler does, so that its requests cost the
// apiserver what a Go scheduler's cost: the pods/s it reaches is the most this
// control plane takes on a workload.
//
//	bench-binder -server URL -token-file F -ca-file F \
//	    -scheduler-name NAME -namespace NS -ready-file F [-concurrency 64]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

const protobuf = "application/vnd.kubernetes.protobuf"

// attempts is how many times a bind or an event is posted before it is given up.
const attempts = 30

type binder struct {
	client    kubernetes.Interface
	scheduler string
	instance  string
	nodes     []string
	next      int
	nextMu    sync.Mutex
	queue     chan *corev1.Pod
	seenMu    sync.Mutex
	seen      map[types.UID]bool
}

// offer queues a pending pod once; a pod whose bind failed is offered again by
// the informer's next resync.
func (b *binder) offer(obj interface{}) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName != "" {
		return
	}
	b.seenMu.Lock()
	if b.seen[pod.UID] {
		b.seenMu.Unlock()
		return
	}
	b.seen[pod.UID] = true
	b.seenMu.Unlock()
	b.queue <- pod
}

func (b *binder) forget(uid types.UID) {
	b.seenMu.Lock()
	delete(b.seen, uid)
	b.seenMu.Unlock()
}

func (b *binder) node() string {
	b.nextMu.Lock()
	defer b.nextMu.Unlock()
	n := b.nodes[b.next%len(b.nodes)]
	b.next++
	return n
}

// retrying calls post until it succeeds; a refusal another try cannot change (a
// pod gone or bound already) ends it, a busy apiserver's 429 or 5xx and
// transport errors are tried again.
func (b *binder) retrying(what string, post func() error) bool {
	for attempt := 1; attempt <= attempts; attempt++ {
		err := post()
		if err == nil {
			return true
		}
		status, isStatus := err.(apierrors.APIStatus)
		if isStatus && status.Status().Code > 0 && status.Status().Code < 429 {
			fmt.Fprintf(os.Stderr, "bench-binder: %s: %v\n", what, err)
			break
		}
		fmt.Fprintf(os.Stderr, "bench-binder: %s: %v, trying again\n", what, err)
		delay := time.Duration(attempt) * 100 * time.Millisecond
		if delay > 2*time.Second {
			delay = 2 * time.Second
		}
		time.Sleep(delay)
	}
	return false
}

func (b *binder) work(ctx context.Context) {
	for {
		var pod *corev1.Pod
		select {
		case <-ctx.Done():
			return
		case pod = <-b.queue:
		}
		node := b.node()
		pods := b.client.CoreV1().Pods(pod.Namespace)
		binding := &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
			Target:     corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: node},
		}
		if !b.retrying("bind "+pod.Name, func() error {
			return pods.Bind(ctx, binding, metav1.CreateOptions{})
		}) {
			b.forget(pod.UID)
			continue
		}
		now := time.Now()
		event := &eventsv1.Event{
			ObjectMeta: metav1.ObjectMeta{
				Name:      fmt.Sprintf("%s.%x", pod.Name, now.UnixNano()),
				Namespace: pod.Namespace,
			},
			EventTime:           metav1.NewMicroTime(now),
			ReportingController: b.scheduler,
			ReportingInstance:   b.instance,
			Action:              "Binding",
			Reason:              "Scheduled",
			Note:                fmt.Sprintf("Successfully assigned %s/%s to %s", pod.Namespace, pod.Name, node),
			Type:                corev1.EventTypeNormal,
			Regarding: corev1.ObjectReference{
				APIVersion:      "v1",
				Kind:            "Pod",
				Namespace:       pod.Namespace,
				Name:            pod.Name,
				UID:             pod.UID,
				ResourceVersion: pod.ResourceVersion,
			},
		}
		events := b.client.EventsV1().Events(pod.Namespace)
		b.retrying("event "+pod.Name, func() error {
			_, err := events.Create(ctx, event, metav1.CreateOptions{})
			return err
		})
	}
}

func main() {
	server := flag.String("server", "", "the apiserver's URL")
	tokenFile := flag.String("token-file", "", "a bearer token file")
	caFile := flag.String("ca-file", "", "the apiserver's CA bundle")
	scheduler := flag.String("scheduler-name", "", "bind the pods with this spec.schedulerName")
	namespace := flag.String("namespace", "", "the pods' namespace")
	readyFile := flag.String("ready-file", "", "written once the pending pods are listed")
	concurrency := flag.Int("concurrency", 64, "pods in flight at once")
	flag.Parse()
	for name, value := range map[string]string{
		"-server": *server, "-token-file": *tokenFile, "-ca-file": *caFile,
		"-scheduler-name": *scheduler, "-namespace": *namespace, "-ready-file": *readyFile,
	} {
		if value == "" {
			fmt.Fprintf(os.Stderr, "bench-binder: %s is required\n", name)
			os.Exit(2)
		}
	}
	if *concurrency < 1 {
		fmt.Fprintln(os.Stderr, "bench-binder: -concurrency: must be at least 1")
		os.Exit(2)
	}

	config := &rest.Config{
		Host:               *server,
		BearerTokenFile:    *tokenFile,
		TLSClientConfig:    rest.TLSClientConfig{CAFile: *caFile},
		ContentConfig:      rest.ContentConfig{ContentType: protobuf, AcceptContentTypes: protobuf + ",application/json"},
		QPS:                1e6,
		Burst:              1e6,
		UserAgent:          "bench-binder",
		DisableCompression: true,
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench-binder: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	nodeList, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench-binder: listing nodes: %v\n", err)
		os.Exit(1)
	}
	if len(nodeList.Items) == 0 {
		fmt.Fprintln(os.Stderr, "bench-binder: the cluster has no nodes")
		os.Exit(1)
	}
	names := make([]string, 0, len(nodeList.Items))
	for _, n := range nodeList.Items {
		names = append(names, n.Name)
	}
	sort.Strings(names)
	hostname, _ := os.Hostname()
	instance := fmt.Sprintf("%s-%s-%d", *scheduler, hostname, os.Getpid())
	if len(instance) > 128 {
		instance = instance[:128]
	}
	b := &binder{
		client:    client,
		scheduler: *scheduler,
		instance:  instance,
		nodes:     names,
		queue:     make(chan *corev1.Pod, 1<<20),
		seen:      map[types.UID]bool{},
	}

	selector := fields.AndSelectors(
		fields.OneTermEqualSelector("spec.schedulerName", *scheduler),
		fields.OneTermEqualSelector("spec.nodeName", ""),
	)
	lw := cache.NewListWatchFromClient(client.CoreV1().RESTClient(), "pods", *namespace, selector)
	// the resync offers again a pod whose bind was given up
	informer := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 3*time.Second, cache.Indexers{})
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    b.offer,
		UpdateFunc: func(_, obj interface{}) { b.offer(obj) },
	}); err != nil {
		fmt.Fprintf(os.Stderr, "bench-binder: %v\n", err)
		os.Exit(1)
	}
	go informer.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		os.Exit(0)
	}
	for i := 0; i < *concurrency; i++ {
		go b.work(ctx)
	}
	if err := os.WriteFile(*readyFile, []byte("ready\n"), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "bench-binder: %v\n", err)
		os.Exit(1)
	}
	fmt.Println("bench-binder ready")
	<-ctx.Done()
}
