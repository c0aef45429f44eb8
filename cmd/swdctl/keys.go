package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

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
			cl, closeFn, err := g.client()
			if err != nil {
				return err
			}
			defer closeFn()
			ctx, cancel := g.ctx(cmd)
			defer cancel()
			req := &swdv1.GossipKeyRequest{Op: op, Cluster: clusterWide}
			if nargs == 1 {
				req.Key = args[0]
			}
			r, err := cl.GossipKeys(ctx, req)
			if err != nil {
				return g.explain(err)
			}
			failed := 0
			for _, res := range r.GetResults() {
				if !res.GetOk() {
					failed++
				}
			}
			if g.output == "json" {
				out := []map[string]any{}
				for _, res := range r.GetResults() {
					out = append(out, map[string]any{"node": res.GetNode(), "ok": res.GetOk(), "error": res.GetError(), "fingerprints": res.GetFingerprints()})
				}
				if err := printJSON(cmd.OutOrStdout(), out); err != nil {
					return err
				}
			} else {
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NODE\tRESULT\tKEYS (primary first)")
				for _, res := range r.GetResults() {
					result := "ok"
					if !res.GetOk() {
						result = "FAILED: " + res.GetError()
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\n", res.GetNode(), result, strings.Join(res.GetFingerprints(), " "))
				}
				if err := tw.Flush(); err != nil {
					return err
				}
			}
			if failed > 0 {
				return fmt.Errorf("%d of %d nodes failed: fix them before the next rotation step", failed, len(r.GetResults()))
			}
			return nil
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
