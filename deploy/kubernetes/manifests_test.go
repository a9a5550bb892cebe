// Package kubernetes checks the manifests of this directory against the
// Kubernetes API's own Go types. A schema validator such as kubeconform
// downloads its JSON schemas at run time, which CI here cannot; the
// k8s.io/api types are what those schemas are generated from, and a strict
// decode rejects an unknown or misspelt field, a wrong type and a
// duplicate key as kubeconform --strict does. It is a module of its own
// so that k8s.io/api stays out of corgifs's go.mod.
package kubernetes

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// kinds are the API objects the manifests may hold, by apiVersion/kind.
var kinds = map[string]func() any{
	"apps/v1/DaemonSet":              func() any { return new(appsv1.DaemonSet) },
	"storage.k8s.io/v1/CSIDriver":    func() any { return new(storagev1.CSIDriver) },
	"v1/PersistentVolume":            func() any { return new(corev1.PersistentVolume) },
	"v1/PersistentVolumeClaim":       func() any { return new(corev1.PersistentVolumeClaim) },
	"v1/Secret":                      func() any { return new(corev1.Secret) },
	"batch/v1/Job":                   func() any { return new(batchv1.Job) },
	"v1/ServiceAccount":              func() any { return new(corev1.ServiceAccount) },
	"storage.k8s.io/v1/StorageClass": func() any { return new(storagev1.StorageClass) },
}

// load strict-decodes every document of every .yaml file here.
func load(t *testing.T) map[string][]any {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	objs := map[string][]any{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range bytes.Split(b, []byte("\n---\n")) {
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &tm); err != nil {
				t.Errorf("%s document %d: %v", f, i, err)
				continue
			}
			key := tm.APIVersion + "/" + tm.Kind
			mk, ok := kinds[key]
			if !ok {
				t.Errorf("%s document %d: apiVersion/kind %s is not one this test knows", f, i, key)
				continue
			}
			obj := mk()
			if err := yaml.UnmarshalStrict(doc, obj); err != nil {
				t.Errorf("%s document %d (%s): %v", f, i, key, err)
				continue
			}
			objs[tm.Kind] = append(objs[tm.Kind], obj)
		}
	}
	return objs
}

func one[T any](t *testing.T, objs map[string][]any, kind string) *T {
	t.Helper()
	if len(objs[kind]) != 1 {
		t.Fatalf("want one %s in the manifests, have %d", kind, len(objs[kind]))
	}
	return objs[kind][0].(*T)
}

// TestManifestsDecodeStrictlyAndReferToEachOther checks every manifest
// against the API types and the references between them: the driver's
// name in the CSIDriver, the PV and the registrar's socket path; the
// claim's volume; the Job's claim and its completions against the PV's
// parts; the DaemonSet's selector and volume mounts.
func TestManifestsDecodeStrictlyAndReferToEachOther(t *testing.T) {
	objs := load(t)
	if t.Failed() {
		return
	}
	drv := one[storagev1.CSIDriver](t, objs, "CSIDriver")
	ds := one[appsv1.DaemonSet](t, objs, "DaemonSet")
	pv := one[corev1.PersistentVolume](t, objs, "PersistentVolume")
	pvc := one[corev1.PersistentVolumeClaim](t, objs, "PersistentVolumeClaim")
	job := one[batchv1.Job](t, objs, "Job")

	if drv.Spec.AttachRequired == nil || *drv.Spec.AttachRequired {
		t.Error("CSIDriver: attachRequired must be false: the driver has no controller to attach")
	}
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != drv.Name {
		t.Errorf("PV %s: spec.csi.driver is not the CSIDriver's name %s", pv.Name, drv.Name)
	} else {
		if pv.Spec.CSI.VolumeAttributes["source"] == "" {
			t.Errorf("PV %s: volumeAttributes.source is missing", pv.Name)
		}
		if ref := pv.Spec.CSI.NodePublishSecretRef; ref != nil {
			found := false
			for _, o := range objs["Secret"] {
				s := o.(*corev1.Secret)
				found = found || (s.Name == ref.Name && s.Namespace == ref.Namespace)
			}
			if !found {
				t.Errorf("PV %s: nodePublishSecretRef %s/%s is not in the manifests", pv.Name, ref.Namespace, ref.Name)
			}
		}
	}
	if pvc.Spec.VolumeName != pv.Name || pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != "" {
		t.Errorf("PVC %s: want volumeName %s and storageClassName \"\" (static provisioning)", pvc.Name, pv.Name)
	}

	// The DaemonSet.
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
		t.Errorf("DaemonSet %s: the selector does not match the template's labels (%v)", ds.Name, err)
	}
	vols := map[string]bool{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		vols[v.Name] = true
	}
	var registrarArgs []string
	propagated := false
	for _, c := range ds.Spec.Template.Spec.Containers {
		for _, m := range c.VolumeMounts {
			if !vols[m.Name] {
				t.Errorf("DaemonSet %s: container %s mounts volume %s, which is not declared", ds.Name, c.Name, m.Name)
			}
			if m.MountPath == "/var/lib/kubelet" && m.MountPropagation != nil && *m.MountPropagation == corev1.MountPropagationBidirectional {
				propagated = true
			}
		}
		if c.Name == "node-driver-registrar" {
			registrarArgs = c.Args
		}
	}
	if !propagated {
		t.Errorf("DaemonSet %s: no container mounts /var/lib/kubelet with Bidirectional propagation: the pods would not see the mounts", ds.Name)
	}
	want := "--kubelet-registration-path=/var/lib/kubelet/plugins/" + drv.Name + "/csi.sock"
	if !slices.Contains(registrarArgs, want) {
		t.Errorf("DaemonSet %s: node-driver-registrar's args %q lack %s", ds.Name, registrarArgs, want)
	}

	// The image is the release's: its name in release/image.go, its tag
	// the version in version.go.
	vb, err := os.ReadFile("../../version.go")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`Version = "([^"]+)"`).FindSubmatch(vb)
	if m == nil {
		t.Fatal("no Version in ../../version.go")
	}
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == "corgifs-csi" && c.Image != "ghcr.io/corgifs/corgifs:"+string(m[1]) {
			t.Errorf("DaemonSet %s: image %s, want the release's ghcr.io/corgifs/corgifs:%s", ds.Name, c.Image, m[1])
		}
	}

	// The Job: one pod per part, each reading its own by its index.
	if job.Spec.CompletionMode == nil || *job.Spec.CompletionMode != batchv1.IndexedCompletion {
		t.Errorf("Job %s: completionMode must be Indexed: the rank is JOB_COMPLETION_INDEX", job.Name)
	}
	if job.Spec.Completions == nil || pv.Spec.CSI == nil || pv.Spec.CSI.VolumeAttributes["parts"] != strconv.Itoa(int(*job.Spec.Completions)) {
		t.Errorf("Job %s: completions must equal the PV's parts (%q)", job.Name, pv.Spec.CSI.VolumeAttributes["parts"])
	}
	claimed, reads := false, false
	for _, v := range job.Spec.Template.Spec.Volumes {
		claimed = claimed || (v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == pvc.Name)
	}
	for _, c := range job.Spec.Template.Spec.Containers {
		reads = reads || strings.Contains(strings.Join(append(c.Command, c.Args...), " "), "JOB_COMPLETION_INDEX")
	}
	if !claimed || !reads {
		t.Errorf("Job %s: claims %s: %v, reads JOB_COMPLETION_INDEX: %v; want both", job.Name, pvc.Name, claimed, reads)
	}
}

// TestStrictDecodeRejectsAMisspeltField shows that the check above is not
// vacuous: a field the API does not have fails.
func TestStrictDecodeRejectsAMisspeltField(t *testing.T) {
	doc := []byte("apiVersion: storage.k8s.io/v1\nkind: CSIDriver\nmetadata:\n  name: x\nspec:\n  attachRequird: false\n")
	if err := yaml.UnmarshalStrict(doc, new(storagev1.CSIDriver)); err == nil || !strings.Contains(err.Error(), "attachRequird") {
		t.Errorf("strict decode of a misspelt field: %v, want an error naming it", err)
	}
}
