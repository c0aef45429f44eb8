package observability

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/swd-project/swd/test/testutil"
)

func deployPath(parts ...string) string {
	return filepath.Join(append([]string{testutil.RepoRoot(), "deploy"}, parts...)...)
}

// promConfig is the part of a Prometheus configuration these tests read.
type promConfig struct {
	Global        map[string]any `yaml:"global"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		StaticConfigs []struct {
			Targets []string          `yaml:"targets"`
			Labels  map[string]string `yaml:"labels"`
		} `yaml:"static_configs"`
		KubernetesSDConfigs []struct {
			Role string `yaml:"role"`
		} `yaml:"kubernetes_sd_configs"`
		RelabelConfigs []relabel `yaml:"relabel_configs"`
	} `yaml:"scrape_configs"`
}

type relabel struct {
	SourceLabels []string `yaml:"source_labels"`
	Separator    *string  `yaml:"separator"`
	Regex        *string  `yaml:"regex"`
	TargetLabel  string   `yaml:"target_label"`
	Replacement  *string  `yaml:"replacement"`
	Action       string   `yaml:"action"`
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, v), path)
}

// promtoolCheck runs `promtool check config` when promtool is on PATH (it
// comes with Debian's prometheus package). Debian builds Prometheus without
// Kubernetes discovery, so a config that uses it is reported, not failed,
// when promtool does not know kubernetes_sd_configs.
func promtoolCheck(t *testing.T, path string) {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		t.Logf("promtool not on PATH (scripts/ensure-prometheus.sh installs it): %s checked by this test only", path)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "check", "config", path).CombinedOutput()
	if err != nil && strings.Contains(string(out), "field kubernetes_sd_configs not found") {
		t.Logf("this promtool lacks Kubernetes discovery (Debian's build): %s checked by this test only", path)
		return
	}
	require.NoError(t, err, "promtool check config %s:\n%s", path, out)
}

// The compose scrape config scrapes every swd of deploy/docker-compose.yml
// at the address its admin server listens on, with node labels equal to
// the swd node names, and promtool accepts it.
func TestComposeScrapeConfig(t *testing.T) {
	path := deployPath("prometheus", "prometheus.yml")
	promtoolCheck(t, path)
	var cfg promConfig
	readYAML(t, path, &cfg)
	type target struct{ node, role string }
	targets := map[string]target{}
	for _, sc := range cfg.ScrapeConfigs {
		if sc.JobName != "swd" {
			continue
		}
		for _, st := range sc.StaticConfigs {
			for _, tg := range st.Targets {
				targets[tg] = target{st.Labels["node"], st.Labels["role"]}
			}
		}
	}
	require.NotEmpty(t, targets, "no job swd with static targets")
	for tg, lb := range targets {
		assert.NotEmpty(t, lb.node, "target %s has no node label", tg)
		assert.Contains(t, []string{"node", "dispatcher"}, lb.role, "target %s role", tg)
	}

	composePath := deployPath("docker-compose.yml")
	if _, err := os.Stat(composePath); err != nil {
		t.Skipf("skipping the cross-check: %s does not exist", composePath)
	}
	var compose struct {
		Services map[string]struct {
			NetworkMode string            `yaml:"network_mode"`
			Environment map[string]string `yaml:"environment"`
		} `yaml:"services"`
	}
	readYAML(t, composePath, &compose)
	// Each swd: the DNS name and port its admin server answers on.
	want := map[string]target{}
	for name, svc := range compose.Services {
		node := svc.Environment["SWD_NODE_NAME"]
		if node == "" {
			continue
		}
		host := name
		if ns, ok := strings.CutPrefix(svc.NetworkMode, "service:"); ok {
			host = ns // shares app-N's namespace and name
		}
		admin := svc.Environment["SWD_ADMIN"]
		require.NotEmpty(t, admin, "service %s sets no SWD_ADMIN", name)
		_, port, ok := strings.Cut(admin, ":")
		require.True(t, ok, "service %s: SWD_ADMIN %q", name, admin)
		assert.True(t, strings.HasPrefix(admin, "0.0.0.0:") || strings.HasPrefix(admin, ":"),
			"service %s: admin %s is not reachable from the Prometheus container", name, admin)
		role := "node"
		if svc.Environment["SWD_ROLE"] == "dispatcher" {
			role = "dispatcher"
		}
		want[host+":"+port] = target{node, role}
	}
	require.NotEmpty(t, want, "no swd service (with SWD_NODE_NAME) in %s", composePath)
	assert.Equal(t, want, targets, "deploy/prometheus/prometheus.yml must scrape exactly the swd services of deploy/docker-compose.yml")
}

// The compose overlay mounts files that exist, joins the cluster's network
// and takes addresses no node uses.
func TestComposeObservabilityOverlay(t *testing.T) {
	var overlay struct {
		Services map[string]struct {
			Volumes  []string `yaml:"volumes"`
			Networks map[string]struct {
				IPv4 string `yaml:"ipv4_address"`
			} `yaml:"networks"`
		} `yaml:"services"`
	}
	readYAML(t, deployPath("prometheus", "docker-compose.observability.yml"), &overlay)
	require.Contains(t, overlay.Services, "prometheus")
	require.Contains(t, overlay.Services, "grafana")
	var compose struct {
		Services map[string]struct {
			Networks map[string]struct {
				IPv4 string `yaml:"ipv4_address"`
			} `yaml:"networks"`
		} `yaml:"services"`
		Networks map[string]any `yaml:"networks"`
	}
	composePath := deployPath("docker-compose.yml")
	haveCompose := true
	if _, err := os.Stat(composePath); err != nil {
		haveCompose = false
	} else {
		readYAML(t, composePath, &compose)
	}
	used := map[string]string{}
	for name, svc := range compose.Services {
		for _, n := range svc.Networks {
			if n.IPv4 != "" {
				used[n.IPv4] = name
			}
		}
	}
	for name, svc := range overlay.Services {
		for _, v := range svc.Volumes {
			src, _, _ := strings.Cut(v, ":")
			// Relative to deploy/, the first compose file's directory.
			_, err := os.Stat(filepath.Join(deployPath(), src))
			assert.NoError(t, err, "service %s mounts %s", name, src)
		}
		require.Contains(t, svc.Networks, "swd", "service %s must join the cluster's network", name)
		if haveCompose {
			assert.Contains(t, compose.Networks, "swd")
			ip := svc.Networks["swd"].IPv4
			assert.NotContains(t, used, ip, "service %s takes %s's address", name, used[ip])
		}
	}
	// Grafana's provisioned data source points at the prometheus service.
	var ds struct {
		Datasources []struct {
			Type string `yaml:"type"`
			URL  string `yaml:"url"`
		} `yaml:"datasources"`
	}
	readYAML(t, deployPath("grafana", "provisioning", "datasources", "prometheus.yml"), &ds)
	require.Len(t, ds.Datasources, 1)
	assert.Equal(t, "prometheus", ds.Datasources[0].Type)
	assert.Equal(t, "http://prometheus:9090", ds.Datasources[0].URL)
}

// The Kubernetes config discovers pods and, applied to example pods the
// way Prometheus applies relabel_configs, keeps exactly the annotated ones
// at their annotated port, with node = pod name.
func TestKubernetesScrapeConfig(t *testing.T) {
	path := deployPath("prometheus", "prometheus-kubernetes.yml")
	promtoolCheck(t, path)
	var cfg promConfig
	readYAML(t, path, &cfg)
	require.Len(t, cfg.ScrapeConfigs, 1)
	sc := cfg.ScrapeConfigs[0]
	require.Len(t, sc.KubernetesSDConfigs, 1)
	assert.Equal(t, "pod", sc.KubernetesSDConfigs[0].Role)

	pod := func(name, ip, port string, ann map[string]string) map[string]string {
		l := map[string]string{
			"__address__":                 ip + ":" + port, // one target per container port
			"__metrics_path__":            "/metrics",
			"__scheme__":                  "http",
			"job":                         sc.JobName,
			"__meta_kubernetes_namespace": "swd",
			"__meta_kubernetes_pod_name":  name,
			"__meta_kubernetes_pod_ip":    ip,
			"__meta_kubernetes_pod_phase": "Running",
			"__meta_kubernetes_pod_label_app_kubernetes_io_component": "node",
		}
		for k, v := range ann {
			l["__meta_kubernetes_pod_annotation_"+k] = v
		}
		return l
	}
	ann := map[string]string{"prometheus_io_scrape": "true", "prometheus_io_port": "9100"}
	for _, port := range []string{"8080", "7070", "9100", "7946"} {
		out, kept := applyRelabel(t, sc.RelabelConfigs, pod("swd-2", "10.1.2.3", port, ann))
		require.True(t, kept, "annotated pod dropped (container port %s)", port)
		assert.Equal(t, map[string]string{
			"__address__": "10.1.2.3:9100", "__metrics_path__": "/metrics", "__scheme__": "http", "job": sc.JobName,
			"namespace": "swd", "pod": "swd-2", "node": "swd-2", "role": "node",
		}, visible(out), "container port %s", port)
	}
	custom := map[string]string{"prometheus_io_scrape": "true", "prometheus_io_port": "9200", "prometheus_io_path": "/admin/metrics"}
	out, kept := applyRelabel(t, sc.RelabelConfigs, pod("swd-0", "10.1.2.4", "8080", custom))
	require.True(t, kept)
	assert.Equal(t, "10.1.2.4:9200", out["__address__"])
	assert.Equal(t, "/admin/metrics", out["__metrics_path__"])

	_, kept = applyRelabel(t, sc.RelabelConfigs, pod("other", "10.1.2.5", "8080", nil))
	assert.False(t, kept, "a pod without prometheus.io/scrape must not be scraped")
	_, kept = applyRelabel(t, sc.RelabelConfigs, pod("off", "10.1.2.6", "8080", map[string]string{"prometheus_io_scrape": "false"}))
	assert.False(t, kept, "prometheus.io/scrape: false must not be scraped")
	done := pod("done", "10.1.2.7", "8080", ann)
	done["__meta_kubernetes_pod_phase"] = "Succeeded"
	_, kept = applyRelabel(t, sc.RelabelConfigs, done)
	assert.False(t, kept, "a completed pod must not be scraped")

	// The pods deploy/k8s runs are scraped at their admin port.
	depPath := deployPath("k8s", "base", "deployment.yaml")
	if _, err := os.Stat(depPath); err != nil {
		t.Skipf("skipping the cross-check: %s does not exist", depPath)
	}
	var dep struct {
		Spec struct {
			Template struct {
				Metadata struct {
					Labels      map[string]string `yaml:"labels"`
					Annotations map[string]string `yaml:"annotations"`
				} `yaml:"metadata"`
				Spec struct {
					Containers []struct {
						Name  string `yaml:"name"`
						Ports []struct {
							Name          string `yaml:"name"`
							ContainerPort int    `yaml:"containerPort"`
						} `yaml:"ports"`
					} `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	readYAML(t, depPath, &dep)
	meta := dep.Spec.Template.Metadata
	sanitize := strings.NewReplacer(".", "_", "/", "_", "-", "_")
	adminPort := ""
	for _, ctr := range dep.Spec.Template.Spec.Containers {
		for _, p := range ctr.Ports {
			if p.Name == "admin" {
				adminPort = strconv.Itoa(p.ContainerPort)
			}
		}
	}
	require.NotEmpty(t, adminPort, "%s: no container port named admin", depPath)
	for _, ctr := range dep.Spec.Template.Spec.Containers {
		for _, p := range ctr.Ports {
			l := pod("swd-5d9f-abcde", "10.1.2.8", strconv.Itoa(p.ContainerPort), nil)
			for k, v := range meta.Annotations {
				l["__meta_kubernetes_pod_annotation_"+sanitize.Replace(k)] = v
			}
			for k, v := range meta.Labels {
				l["__meta_kubernetes_pod_label_"+sanitize.Replace(k)] = v
			}
			out, kept := applyRelabel(t, sc.RelabelConfigs, l)
			require.True(t, kept, "%s: pods are not scraped (annotations %v)", depPath, meta.Annotations)
			assert.Equal(t, "10.1.2.8:"+adminPort, out["__address__"], "%s: scraped port (container %s port %s)", depPath, ctr.Name, p.Name)
			assert.Equal(t, "swd-5d9f-abcde", out["node"])
			assert.Equal(t, meta.Labels["app.kubernetes.io/component"], out["role"])
		}
	}
}

// visible drops the labels Prometheus discards after relabelling (__meta_*)
// but keeps the ones that address the scrape.
func visible(l map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range l {
		if !strings.HasPrefix(k, "__meta_") {
			out[k] = v
		}
	}
	return out
}

// applyRelabel applies relabel_configs as Prometheus does for the actions
// these configs use (replace, keep, drop): source label values joined by
// the separator (";"), the regex fully anchored (default "(.*)"), $N
// expanded in the replacement (default "$1"); a replace whose result is
// empty deletes the target label.
func applyRelabel(t *testing.T, rules []relabel, in map[string]string) (map[string]string, bool) {
	t.Helper()
	l := map[string]string{}
	for k, v := range in {
		l[k] = v
	}
	for _, r := range rules {
		sep := ";"
		if r.Separator != nil {
			sep = *r.Separator
		}
		vals := make([]string, len(r.SourceLabels))
		for i, s := range r.SourceLabels {
			vals[i] = l[s]
		}
		val := strings.Join(vals, sep)
		pat := "(.*)"
		if r.Regex != nil {
			pat = *r.Regex
		}
		re, err := regexp.Compile("^(?:" + pat + ")$")
		require.NoError(t, err, "relabel regex %q", pat)
		action := r.Action
		if action == "" {
			action = "replace"
		}
		switch action {
		case "keep":
			if !re.MatchString(val) {
				return nil, false
			}
		case "drop":
			if re.MatchString(val) {
				return nil, false
			}
		case "replace":
			m := re.FindStringSubmatchIndex(val)
			if m == nil {
				continue
			}
			repl := "$1"
			if r.Replacement != nil {
				repl = *r.Replacement
			}
			res := string(re.ExpandString(nil, repl, val, m))
			if res == "" {
				delete(l, r.TargetLabel)
			} else {
				l[r.TargetLabel] = res
			}
		default:
			t.Fatalf("relabel action %q not simulated by this test", action)
		}
	}
	return l, true
}

// The example scrape configs set the node and role labels the dashboard
// filters on, and scrape often enough for the dashboard's rate windows.
func TestScrapeConfigsFeedTheDashboard(t *testing.T) {
	for _, name := range []string{"prometheus.yml", "prometheus-kubernetes.yml"} {
		var cfg promConfig
		readYAML(t, deployPath("prometheus", name), &cfg)
		iv, _ := cfg.Global["scrape_interval"].(string)
		d, err := time.ParseDuration(iv)
		require.NoError(t, err, "%s: scrape_interval %q", name, iv)
		assert.LessOrEqual(t, d, 15*time.Second, "%s: scrape_interval", name)
		var labels []string
		for _, sc := range cfg.ScrapeConfigs {
			if sc.JobName != "swd" {
				continue
			}
			for _, st := range sc.StaticConfigs {
				for k := range st.Labels {
					labels = append(labels, k)
				}
			}
			for _, r := range sc.RelabelConfigs {
				if r.TargetLabel != "" {
					labels = append(labels, r.TargetLabel)
				}
			}
		}
		sort.Strings(labels)
		assert.Contains(t, labels, "node", "%s: no node label for the dashboard", name)
		assert.Contains(t, labels, "role", "%s: no role label for the dashboard", name)
	}
}
