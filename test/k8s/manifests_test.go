// Package k8s validates the Kubernetes manifests of deploy/k8s without a
// cluster: every file decodes strictly (unknown or duplicate fields fail)
// into the Kubernetes API types, the kustomization lists every file, and
// the pieces fit together (selectors, named ports, probes, config and
// secret references, swd's flags, drain timing).
package k8s

import (
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

func baseDir(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	require.True(t, ok)
	return filepath.Join(filepath.Dir(file), "..", "..", "deploy", "k8s", "base")
}

// kustomization is the subset of kustomize's Kustomization the base uses;
// decoding is strict, so a field outside it (a typo, or a feature this test
// does not know yet) fails until it is added here.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace,omitempty"`
	Resources  []string `json:"resources"`
	Labels     []struct {
		Pairs            map[string]string `json:"pairs"`
		IncludeSelectors bool              `json:"includeSelectors,omitempty"`
		IncludeTemplates bool              `json:"includeTemplates,omitempty"`
	} `json:"labels,omitempty"`
	Images []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
		Digest  string `json:"digest,omitempty"`
	} `json:"images,omitempty"`
}

// manifests is the decoded base.
type manifests struct {
	deployment *appsv1.Deployment
	services   map[string]*corev1.Service
	configMaps map[string]*corev1.ConfigMap
	secrets    map[string]*corev1.Secret
	pdb        *policyv1.PodDisruptionBudget
}

func loadKustomization(t *testing.T, dir string) kustomization {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	require.NoError(t, err)
	var k kustomization
	require.NoError(t, yaml.UnmarshalStrict(data, &k), "kustomization.yaml")
	return k
}

// decodeAll strictly decodes every resource the kustomization lists.
func decodeAll(t *testing.T, dir string, k kustomization) manifests {
	t.Helper()
	scheme := k8sruntime.NewScheme()
	require.NoError(t, corev1.AddToScheme(scheme))
	require.NoError(t, appsv1.AddToScheme(scheme))
	require.NoError(t, policyv1.AddToScheme(scheme))
	codecs := serializer.NewCodecFactory(scheme, serializer.EnableStrict)
	dec := codecs.UniversalDeserializer()

	m := manifests{services: map[string]*corev1.Service{}, configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}}
	for _, name := range k.Resources {
		data, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		docs := splitDocuments(data)
		require.Len(t, docs, 1, "%s: one object per file", name)
		obj, gvk, err := dec.Decode(docs[0], nil, nil)
		require.NoError(t, err, "%s does not decode strictly into the Kubernetes API types", name)
		switch o := obj.(type) {
		case *appsv1.Deployment:
			require.Nil(t, m.deployment, "%s: a second Deployment", name)
			m.deployment = o
		case *corev1.Service:
			m.services[o.Name] = o
		case *corev1.ConfigMap:
			m.configMaps[o.Name] = o
		case *corev1.Secret:
			m.secrets[o.Name] = o
		case *policyv1.PodDisruptionBudget:
			m.pdb = o
		default:
			t.Fatalf("%s: unexpected kind %s", name, gvk)
		}
		meta, ok := obj.(metav1.Object)
		require.True(t, ok)
		assert.NotEmpty(t, meta.GetName(), "%s: metadata.name", name)
		assert.Empty(t, meta.GetNamespace(), "%s: leave the namespace to kustomize or kubectl", name)
	}
	require.NotNil(t, m.deployment, "no Deployment")
	require.NotNil(t, m.pdb, "no PodDisruptionBudget")
	return m
}

// splitDocuments splits a YAML stream on "---" lines, dropping empty
// documents.
func splitDocuments(data []byte) [][]byte {
	var out [][]byte
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
		if strings.TrimSpace(stripComments(doc)) != "" {
			out = append(out, []byte(doc))
		}
	}
	return out
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

func TestKustomizationListsEveryFile(t *testing.T) {
	dir := baseDir(t)
	k := loadKustomization(t, dir)
	assert.Equal(t, "kustomize.config.k8s.io/v1beta1", k.APIVersion)
	assert.Equal(t, "Kustomization", k.Kind)

	var files []string
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		ext := filepath.Ext(e.Name())
		if e.IsDir() || (ext != ".yaml" && ext != ".yml") || e.Name() == "kustomization.yaml" {
			continue
		}
		files = append(files, e.Name())
	}
	listed := slices.Clone(k.Resources)
	slices.Sort(listed)
	assert.Equal(t, files, listed, "kustomization.yaml resources must list exactly the manifests in %s", dir)
	assert.Len(t, slices.Compact(slices.Clone(listed)), len(listed), "a resource listed twice")
}

func TestManifestsDecodeStrictly(t *testing.T) {
	dir := baseDir(t)
	m := decodeAll(t, dir, loadKustomization(t, dir))
	assert.Contains(t, m.services, "swd")
	assert.Contains(t, m.services, "swd-gossip")
	assert.Contains(t, m.configMaps, "swd-config")
	assert.Contains(t, m.secrets, "swd-secrets")
}

// TestStrictDecodingCatchesMistakes proves the decoder used above is strict.
func TestStrictDecodingCatchesMistakes(t *testing.T) {
	scheme := k8sruntime.NewScheme()
	require.NoError(t, appsv1.AddToScheme(scheme))
	dec := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
	for name, doc := range map[string]string{
		"unknown field":   "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replicas: 1, replica: 2}\n",
		"duplicate field": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  replicas: 1\n  replicas: 2\n",
		"wrong type":      "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replicas: four}\n",
	} {
		_, _, err := dec.Decode([]byte(doc), nil, nil)
		assert.Error(t, err, name)
	}
}

func podLabelsMatch(t *testing.T, what string, sel map[string]string, labels map[string]string) {
	t.Helper()
	require.NotEmpty(t, sel, "%s: empty selector", what)
	for k, v := range sel {
		assert.Equal(t, v, labels[k], "%s: selector %s=%s does not match the pod template's labels", what, k, v)
	}
}

func container(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	i := slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == name })
	require.GreaterOrEqual(t, i, 0, "no container %q", name)
	return spec.Containers[i]
}

func namedPort(c corev1.Container, name string) (corev1.ContainerPort, bool) {
	for _, p := range c.Ports {
		if p.Name == name {
			return p, true
		}
	}
	return corev1.ContainerPort{}, false
}

// env is a container's effective environment as far as the manifests say:
// ConfigMap and Secret keys (envFrom), then its own env (values, or
// "<from ...>" for references).
func env(t *testing.T, m manifests, c corev1.Container) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, ef := range c.EnvFrom {
		switch {
		case ef.ConfigMapRef != nil:
			cm, ok := m.configMaps[ef.ConfigMapRef.Name]
			require.True(t, ok, "container %s: envFrom ConfigMap %q is not in the base", c.Name, ef.ConfigMapRef.Name)
			for k, v := range cm.Data {
				out[ef.Prefix+k] = v
			}
		case ef.SecretRef != nil:
			s, ok := m.secrets[ef.SecretRef.Name]
			require.True(t, ok, "container %s: envFrom Secret %q is not in the base", c.Name, ef.SecretRef.Name)
			for k, v := range s.StringData {
				out[ef.Prefix+k] = v
			}
			for k, v := range s.Data {
				out[ef.Prefix+k] = string(v)
			}
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			out[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil:
			out[e.Name] = "<field " + e.ValueFrom.FieldRef.FieldPath + ">"
		case e.ValueFrom.ConfigMapKeyRef != nil:
			r := e.ValueFrom.ConfigMapKeyRef
			require.Contains(t, m.configMaps, r.Name, "env %s", e.Name)
			require.Contains(t, m.configMaps[r.Name].Data, r.Key, "env %s", e.Name)
			out[e.Name] = m.configMaps[r.Name].Data[r.Key]
		case e.ValueFrom.SecretKeyRef != nil:
			r := e.ValueFrom.SecretKeyRef
			require.Contains(t, m.secrets, r.Name, "env %s", e.Name)
			s := m.secrets[r.Name]
			v, ok := s.StringData[r.Key]
			if !ok {
				var b []byte
				b, ok = s.Data[r.Key]
				v = string(b)
			}
			require.True(t, ok, "env %s: key %s not in Secret %s", e.Name, r.Key, r.Name)
			out[e.Name] = v
		default:
			out[e.Name] = "<from elsewhere>"
		}
	}
	return out
}

func TestDeploymentFitsTogether(t *testing.T) {
	dir := baseDir(t)
	m := decodeAll(t, dir, loadKustomization(t, dir))
	d := m.deployment
	spec := d.Spec.Template.Spec
	labels := d.Spec.Template.Labels

	// Selectors: the Deployment's, both Services' and the PDB's pick the pods.
	require.NotNil(t, d.Spec.Selector)
	podLabelsMatch(t, "deployment", d.Spec.Selector.MatchLabels, labels)
	for name, s := range m.services {
		podLabelsMatch(t, "service "+name, s.Spec.Selector, labels)
	}
	require.NotNil(t, m.pdb.Spec.Selector)
	assert.Equal(t, d.Spec.Selector.MatchLabels, m.pdb.Spec.Selector.MatchLabels, "PDB selector")
	require.NotNil(t, m.pdb.Spec.MaxUnavailable)
	require.NotNil(t, d.Spec.Replicas)
	assert.Less(t, m.pdb.Spec.MaxUnavailable.IntValue(), int(*d.Spec.Replicas), "the PDB must allow a disruption")

	app, swd := container(t, spec, "app"), container(t, spec, "swd")
	assert.Equal(t, app.Image, swd.Image, "app and swd come from the one image")
	assert.Equal(t, []string{"/dummyapp"}, app.Command)
	assert.Empty(t, swd.Command, "swd is the image's entrypoint")

	// Services' target ports are the swd container's named ports.
	for name, s := range m.services {
		for _, p := range s.Spec.Ports {
			require.Equal(t, intstr.String, p.TargetPort.Type, "service %s port %s: target a named port", name, p.Name)
			cp, ok := namedPort(swd, p.TargetPort.StrVal)
			require.True(t, ok, "service %s: target port %q is not a port of the swd container", name, p.TargetPort.StrVal)
			assert.Equal(t, p.Protocol, cp.Protocol, "service %s port %s protocol", name, p.Name)
		}
	}
	gossip := m.services["swd-gossip"]
	require.NotNil(t, gossip)
	assert.Equal(t, corev1.ClusterIPNone, gossip.Spec.ClusterIP, "swd-gossip must be headless")
	assert.True(t, gossip.Spec.PublishNotReadyAddresses, "starting pods must find each other before they are ready")
	var protos []corev1.Protocol
	for _, p := range gossip.Spec.Ports {
		assert.EqualValues(t, 7946, p.Port)
		protos = append(protos, p.Protocol)
	}
	assert.ElementsMatch(t, []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP}, protos, "memberlist gossips over UDP and TCP")

	// Probes on swd's admin port.
	admin, ok := namedPort(swd, "admin")
	require.True(t, ok)
	require.NotNil(t, swd.ReadinessProbe)
	require.NotNil(t, swd.ReadinessProbe.HTTPGet)
	assert.Equal(t, "/readyz", swd.ReadinessProbe.HTTPGet.Path)
	assert.Equal(t, "admin", swd.ReadinessProbe.HTTPGet.Port.StrVal)
	require.NotNil(t, swd.LivenessProbe)
	require.NotNil(t, swd.LivenessProbe.HTTPGet)
	assert.Equal(t, "/healthz", swd.LivenessProbe.HTTPGet.Path)
	assert.Equal(t, "admin", swd.LivenessProbe.HTTPGet.Port.StrVal)

	// swd's environment: bound beyond loopback on the container's ports,
	// with a token, an advertise address, and the headless Service to join.
	se := env(t, m, swd)
	for flagEnv, port := range map[string]string{"SWD_LISTEN": "http", "SWD_GRPC": "grpc", "SWD_ADMIN": "admin", "SWD_GOSSIP": "gossip"} {
		cp, ok := namedPort(swd, port)
		require.True(t, ok, "port %s", port)
		assert.Equal(t, fmt.Sprintf("0.0.0.0:%d", cp.ContainerPort), se[flagEnv], "%s must bind the %s port on every interface", flagEnv, port)
	}
	assert.Equal(t, fmt.Sprintf("0.0.0.0:%d", admin.ContainerPort), se["SWD_ADMIN"])
	assert.Equal(t, "true", se["SWD_INSECURE"], "plaintext gRPC beyond loopback needs --insecure (or --tls-*)")
	assert.NotEmpty(t, se["SWD_CONTROL_TOKEN"], "swd refuses a non-loopback --grpc without a control token")
	assert.Equal(t, "swd-gossip:7946", se["SWD_JOIN"], "join through the headless Service")
	assert.Equal(t, "$(POD_IP):7946", se["SWD_ADVERTISE"], "advertise host:port (swd derives the peers' gRPC address from its host)")
	assert.Equal(t, "<field status.podIP>", se["POD_IP"])
	assert.Equal(t, "$(POD_NAME)", se["SWD_NODE_NAME"])
	assert.Equal(t, "<field metadata.name>", se["POD_NAME"])
	// $(VAR) expands only variables defined before it in env.
	order := map[string]int{}
	for i, e := range swd.Env {
		order[e.Name] = i
	}
	assert.Less(t, order["POD_IP"], order["SWD_ADVERTISE"])
	assert.Less(t, order["POD_NAME"], order["SWD_NODE_NAME"])
	assert.Equal(t, "http://"+env(t, m, app)["DUMMYAPP_LISTEN"], se["SWD_APP"], "swd fronts the app container")
	assert.True(t, strings.HasPrefix(env(t, m, app)["DUMMYAPP_LISTEN"], "127.0.0.1:"), "the app listens on loopback only")
	require.NotNil(t, spec.EnableServiceLinks)
	assert.False(t, *spec.EnableServiceLinks, "service links inject SWD_*-like variables into swd's environment")

	key, err := base64.StdEncoding.DecodeString(se["SWD_GOSSIP_KEY"])
	require.NoError(t, err, "SWD_GOSSIP_KEY must be base64")
	assert.Contains(t, []int{16, 24, 32}, len(key), "SWD_GOSSIP_KEY must decode to 16, 24 or 32 bytes")

	// Shutdown: swd drains on SIGTERM after a preStop sleep; the app
	// outlives the drain; the grace period covers both.
	drain, err := time.ParseDuration(se["SWD_DRAIN_TIMEOUT"])
	require.NoError(t, err, "SWD_DRAIN_TIMEOUT")
	swdSleep, appSleep := preStopSleep(t, swd), preStopSleep(t, app)
	require.NotNil(t, spec.TerminationGracePeriodSeconds)
	grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	assert.Greater(t, grace, swdSleep+drain, "grace period must cover swd's preStop sleep and drain")
	assert.GreaterOrEqual(t, appSleep, swdSleep+drain, "the app must keep serving until swd's drain ends")
	assert.Greater(t, grace, appSleep, "grace period must cover the app's preStop sleep")

	// Hardening and resources.
	require.NotNil(t, spec.SecurityContext)
	require.NotNil(t, spec.SecurityContext.RunAsNonRoot)
	assert.True(t, *spec.SecurityContext.RunAsNonRoot)
	require.NotNil(t, spec.SecurityContext.RunAsUser)
	assert.EqualValues(t, 65532, *spec.SecurityContext.RunAsUser, "the image's USER")
	for _, c := range spec.Containers {
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			assert.Contains(t, c.Resources.Requests, r, "container %s: requests.%s", c.Name, r)
			assert.Contains(t, c.Resources.Limits, r, "container %s: limits.%s", c.Name, r)
		}
		require.NotNil(t, c.SecurityContext, "container %s", c.Name)
		require.NotNil(t, c.SecurityContext.ReadOnlyRootFilesystem)
		assert.True(t, *c.SecurityContext.ReadOnlyRootFilesystem, "container %s", c.Name)
		require.NotNil(t, c.SecurityContext.AllowPrivilegeEscalation)
		assert.False(t, *c.SecurityContext.AllowPrivilegeEscalation, "container %s", c.Name)
	}
}

func preStopSleep(t *testing.T, c corev1.Container) time.Duration {
	t.Helper()
	require.NotNil(t, c.Lifecycle, "container %s: lifecycle", c.Name)
	require.NotNil(t, c.Lifecycle.PreStop, "container %s: preStop", c.Name)
	require.NotNil(t, c.Lifecycle.PreStop.Sleep, "container %s: preStop sleep (the image has no shell)", c.Name)
	return time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
}

// flagEnvNames runs `bin/NAME --help` and returns the environment
// variables its flags read (PREFIX_ + upper-case name, dashes as
// underscores), skipping if the binary is not built.
func flagEnvNames(t *testing.T, name, prefix string) map[string]bool {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	bin := filepath.Join(filepath.Dir(file), "..", "..", "bin", name)
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("skipping: bin/%s is not built (run `make build`): %v", name, err)
	}
	out, err := exec.Command(bin, "--help").CombinedOutput()
	require.NoError(t, err, "%s --help: %s", name, out)
	names := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`).FindAllStringSubmatch(string(out), -1) {
		names[prefix+"_"+strings.ToUpper(strings.ReplaceAll(m[1], "-", "_"))] = true
	}
	require.NotEmpty(t, names, "no flags in %s --help", name)
	return names
}

// TestEnvironmentNamesAreFlags: a misspelt SWD_* or DUMMYAPP_* variable is
// silently ignored by the binaries, so check every one against their flags.
func TestEnvironmentNamesAreFlags(t *testing.T) {
	swdFlags := flagEnvNames(t, "swd", "SWD")
	appFlags := flagEnvNames(t, "dummyapp", "DUMMYAPP")
	dir := baseDir(t)
	m := decodeAll(t, dir, loadKustomization(t, dir))
	spec := m.deployment.Spec.Template.Spec
	for name, known := range map[string]map[string]bool{"swd": swdFlags, "app": appFlags} {
		for v := range env(t, m, container(t, spec, name)) {
			if strings.HasPrefix(v, "SWD_") || strings.HasPrefix(v, "DUMMYAPP_") {
				assert.True(t, known[v], "container %s: %s is not a flag's variable", name, v)
			}
		}
	}
}
