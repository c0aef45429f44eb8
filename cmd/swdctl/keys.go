package main

import (
	"strings"

	"github.com/spf13/cobra"

	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

func gossipKeyCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "gossip-key",
		Short: "Manage the gossip encryption keys (rotation without a partition)",
		Long: `Rotate the gossip key in three steps, each on the whole cluster:

  swdctl gossip-key install NEWKEY --cluster   # every member accepts both keys
  swdctl gossip-key use NEWKEY --cluster       # every member sends with the new key
  swdctl gossip-key remove OLDKEY --cluster    # the old key is gone

Keys are base64 AES keys (16, 24 or 32 bytes), e.g. from: head -c 32 /dev/urandom | base64.
Only key fingerprints are ever printed. Members must have been started with --gossip-key;
update their --gossip-key setting too, so a restart keeps the new key.`,
	}
	var clusterWide bool
	run := func(op swdv1.GossipKeyRequest_Op, nargs int) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			req := &swdv1.GossipKeyRequest{Op: op, Cluster: clusterWide}
			if nargs == 1 {
				req.Key = args[0]
			}
			r, err := call(g, cmd, swdv1.ControlClient.GossipKeys, req)
			if err != nil {
				return err
			}
			return printResults(g, cmd, r.GetResults(), resultColumns[*swdv1.NodeKeys]{
				header: "KEYS (primary first)",
				cells:  func(res *swdv1.NodeKeys) string { return strings.Join(res.GetFingerprints(), " ") },
				json: func(res *swdv1.NodeKeys) map[string]any {
					return map[string]any{"node": res.GetNode(), "ok": res.GetOk(), "error": res.GetError(), "fingerprints": res.GetFingerprints()}
				},
				failure: "failed: fix them before the next rotation step",
			})
		}
	}
	list := &cobra.Command{Use: "list", Short: "List installed key fingerprints", Args: cobra.NoArgs, RunE: run(swdv1.GossipKeyRequest_OP_LIST, 0)}
	install := &cobra.Command{Use: "install KEY", Short: "Accept gossip encrypted with KEY (step 1)", Args: cobra.ExactArgs(1), RunE: run(swdv1.GossipKeyRequest_OP_INSTALL, 1)}
	use := &cobra.Command{Use: "use KEY", Short: "Encrypt outgoing gossip with KEY (step 2)", Args: cobra.ExactArgs(1), RunE: run(swdv1.GossipKeyRequest_OP_USE, 1)}
	remove := &cobra.Command{Use: "remove KEY", Short: "Remove a key that is no longer primary (step 3)", Args: cobra.ExactArgs(1), RunE: run(swdv1.GossipKeyRequest_OP_REMOVE, 1)}
	for _, c := range []*cobra.Command{list, install, use, remove} {
		c.Flags().BoolVar(&clusterWide, "cluster", false, "apply on every member")
		cmd.AddCommand(c)
	}
	return cmd
}
