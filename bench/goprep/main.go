// Command goprep is the Go peer of bench/prepare.py: a minimal DRA kubelet plugin on the
// official helper (k8s.io/dynamic-resource-allocation/kubeletplugin) that does the per-claim
// file work numadra does, so the bench can report numadra's figures as ratios to it.
//
// Per prepared claim it writes, like numadra:
//   - one CDI spec file, <cdi-dir>/<driver>-claim_<uid>.json (temp file + rename, unsynced:
//     numadra writes its spec the same way and relies on its journal to re-create it);
//   - one metadata file and one metadata CDI spec per request (the helper's own writer,
//     EnableDeviceMetadata; it fsyncs each file and its directory, as upstream does);
//   - one checkpoint of the prepared claims, <plugin-dir>/checkpoint.json (temp file, fsync,
//     rename), rewritten once per call, as numadra saves its journal once per call.
//
// Unprepare removes the claim's CDI spec, drops it from the checkpoint and saves it (the helper
// removes the metadata files). The process serves until its stdin closes, so the bench stops
// it the same way as the numadra child.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	metadatav1beta1 "k8s.io/dynamic-resource-allocation/api/metadata/v1beta1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/utils/ptr"
)

// cdiVersion is the CDI spec version the per-claim spec declares (env edits only need 0.3.0;
// numadra writes 0.5.0 for the same content, the text differs by one field).
const cdiVersion = "0.5.0"

type cdiEdits struct {
	Env []string `json:"env,omitempty"`
}

type cdiDevice struct {
	Name           string   `json:"name"`
	ContainerEdits cdiEdits `json:"containerEdits"`
}

type cdiSpec struct {
	CDIVersion string      `json:"cdiVersion"`
	Kind       string      `json:"kind"`
	Devices    []cdiDevice `json:"devices"`
}

// preparedClaim is what the checkpoint keeps of a claim: enough to answer a repeated prepare.
type preparedClaim struct {
	Namespace string                 `json:"namespace"`
	Name      string                 `json:"name"`
	Devices   []kubeletplugin.Device `json:"devices"`
}

type driver struct {
	name     string
	cdiDir   string
	ckptPath string
	mu       sync.Mutex
	prepared map[types.UID]preparedClaim
}

func (d *driver) specPath(uid types.UID) string {
	return filepath.Join(d.cdiDir, fmt.Sprintf("%s-claim_%s.json", d.name, uid))
}

// writeFile writes data to path through a temp file in the same directory and a rename;
// with sync it also fsyncs the file before the rename.
func writeFile(path string, data []byte, sync bool) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	name := tmp.Name()
	_, err = tmp.Write(data)
	if err == nil && sync {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(name, path)
	}
	if err != nil {
		_ = os.Remove(name)
	}
	return err
}

func (d *driver) saveCheckpoint() error {
	data, err := json.Marshal(d.prepared)
	if err != nil {
		return err
	}
	return writeFile(d.ckptPath, data, true)
}

// prepareOne builds the claim's devices and CDI spec; the caller saves the checkpoint.
func (d *driver) prepareOne(claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	if done, ok := d.prepared[claim.UID]; ok {
		return done.Devices, nil
	}
	spec := cdiSpec{CDIVersion: cdiVersion, Kind: d.name + "/claim"}
	var devices []kubeletplugin.Device
	for _, result := range claim.Status.Allocation.Devices.Results {
		if result.Driver != d.name {
			continue
		}
		cdiName := fmt.Sprintf("%s-%s", claim.UID, result.Device)
		spec.Devices = append(spec.Devices, cdiDevice{
			Name: cdiName,
			ContainerEdits: cdiEdits{Env: []string{
				fmt.Sprintf("NUMADRA_DEVICE_%s=%s", result.Request, result.Device),
				fmt.Sprintf("NUMADRA_CLAIM_UID=%s", claim.UID),
			}},
		})
		device := kubeletplugin.Device{
			Requests:     []string{result.Request},
			PoolName:     result.Pool,
			DeviceName:   result.Device,
			CDIDeviceIDs: []string{d.name + "/claim=" + cdiName},
			Metadata: &kubeletplugin.DeviceMetadata{Attributes: map[string]resourceapi.DeviceAttribute{
				"resource.kubernetes.io/pcieRoot": {StringValue: ptr.To("pci0000:00")},
				"numaNode":                        {IntValue: ptr.To(int64(0))},
			}},
		}
		if result.ShareID != nil {
			device.ShareID = result.ShareID
		}
		devices = append(devices, device)
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	if err := writeFile(d.specPath(claim.UID), data, false); err != nil {
		return nil, fmt.Errorf("write CDI spec: %w", err)
	}
	d.prepared[claim.UID] = preparedClaim{Namespace: claim.Namespace, Name: claim.Name, Devices: devices}
	return devices, nil
}

func (d *driver) PrepareResourceClaims(
	_ context.Context, claims []*resourceapi.ResourceClaim,
) (map[types.UID]kubeletplugin.PrepareResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	results := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	var fresh []types.UID
	for _, claim := range claims {
		_, known := d.prepared[claim.UID]
		devices, err := d.prepareOne(claim)
		results[claim.UID] = kubeletplugin.PrepareResult{Devices: devices, Err: err}
		if err == nil && !known {
			fresh = append(fresh, claim.UID)
		}
	}
	if len(fresh) > 0 {
		if err := d.saveCheckpoint(); err != nil {
			for _, uid := range fresh {
				delete(d.prepared, uid)
				_ = os.Remove(d.specPath(uid))
				results[uid] = kubeletplugin.PrepareResult{Err: fmt.Errorf("save checkpoint: %w", err)}
			}
		}
	}
	return results, nil
}

func (d *driver) UnprepareResourceClaims(
	_ context.Context, claims []kubeletplugin.NamespacedObject,
) (map[types.UID]error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	results := make(map[types.UID]error, len(claims))
	changed := false
	for _, claim := range claims {
		results[claim.UID] = nil
		if err := os.Remove(d.specPath(claim.UID)); err != nil && !errors.Is(err, os.ErrNotExist) {
			results[claim.UID] = err
			continue
		}
		if _, ok := d.prepared[claim.UID]; ok {
			delete(d.prepared, claim.UID)
			changed = true
		}
	}
	if changed {
		if err := d.saveCheckpoint(); err != nil {
			for uid := range results {
				results[uid] = fmt.Errorf("save checkpoint: %w", err)
			}
		}
	}
	return results, nil
}

func (d *driver) HandleError(_ context.Context, err error, msg string) {
	fmt.Fprintf(os.Stderr, "%s: %v\n", msg, err)
}

func (d *driver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

func main() {
	driverName := flag.String("driver", "numadra.dev", "driver name")
	nodeName := flag.String("node", "bench-node", "node name")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the apiserver holding the claims")
	registrarDir := flag.String("registrar-dir", "", "where the registration socket goes")
	pluginDir := flag.String("plugin-dir", "", "plugin data dir: DRA socket, metadata, checkpoint")
	cdiDir := flag.String("cdi-dir", "", "where the CDI specs go")
	// client-go's default limiter (5 QPS, burst 10) would make a 32-claim prepare wait seconds
	// for its 32 GETs; the bench compares against the helper at its best, so it is off
	qps := flag.Float64("kube-api-qps", -1, "client-side QPS limit (negative: none)")
	flag.Parse()

	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	config.QPS = float32(*qps)
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	d := &driver{
		name:     *driverName,
		cdiDir:   *cdiDir,
		ckptPath: filepath.Join(*pluginDir, "checkpoint.json"),
		prepared: map[types.UID]preparedClaim{},
	}
	if data, err := os.ReadFile(d.ckptPath); err == nil {
		_ = json.Unmarshal(data, &d.prepared)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	helper, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.DriverName(*driverName),
		kubeletplugin.NodeName(*nodeName),
		kubeletplugin.KubeClient(client),
		kubeletplugin.RegistrarDirectoryPath(*registrarDir),
		kubeletplugin.PluginDataDirectoryPath(*pluginDir),
		kubeletplugin.HealthService(false),
		kubeletplugin.EnableDeviceMetadata(true, []schema.GroupVersion{metadatav1beta1.SchemeGroupVersion}),
		kubeletplugin.CDIDirectory(*cdiDir),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	_, _ = io.Copy(io.Discard, os.Stdin) // the bench closes stdin to stop us
	helper.Stop()
}
