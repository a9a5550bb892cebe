package main

import (
	"bytes"
	"os"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestExamplePVAttributesAndSecretAreAccepted keeps the example manifest
// of deploy/kubernetes (whose API types are checked in that module) in
// step with the driver: every volume attribute of the PV and every key of
// its secret is one the driver takes.
func TestExamplePVAttributesAndSecretAreAccepted(t *testing.T) {
	b, err := os.ReadFile("../../deploy/kubernetes/example-pv-pvc.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var attrs, secret map[string]string
	for _, doc := range bytes.Split(b, []byte("\n---\n")) {
		var o struct {
			Kind       string
			StringData map[string]string `yaml:"stringData"`
			Spec       struct {
				CSI struct {
					VolumeAttributes map[string]string `yaml:"volumeAttributes"`
				}
			}
		}
		if err := yaml.Unmarshal(doc, &o); err != nil {
			t.Fatal(err)
		}
		switch o.Kind {
		case "PersistentVolume":
			attrs = o.Spec.CSI.VolumeAttributes
		case "Secret":
			secret = o.StringData
		}
	}
	d := newDriver(config{stateDir: "/var/lib/corgifs-csi"}, nil)
	if _, err := d.mountArgs(attrs, "/target", "v"); err != nil {
		t.Errorf("the example PV's volumeAttributes: %v", err)
	}
	if _, err := daemonEnv(secret); err != nil || len(secret) == 0 {
		t.Errorf("the example secret %v: %v", secret, err)
	}
}
