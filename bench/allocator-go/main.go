// Command allocbench runs Gazette's allocator (go.gazette.dev/core/allocator) through the simulated
// rolling deploy of Gazette's allocator/benchmark_test.go against a given etcd, and prints one JSON
// object: how long Allocate ran, how much of that the scenario's own steps took, and the etcd
// revisions bracketing the run (bench/allocator_scale.py counts the assignment changes from etcd's
// history between them, the same way for both allocators).
//
// The scenario, as Gazette's benchmark defines it for n members (n a multiple of 10): a leader member
// (limit 1) that is never rolled, n/2 members of limit 1500 and 200*n items of replication 3 (200 per
// member is Gazette's; -items-per-member changes it for smoke tests); then, each
// time the allocator is idle and every assignment is marked consistent, one step: n/10 new members of
// limit 1205 join ("up"), or n/10 old members are marked exiting ("down"), alternating, up first or
// down first, until all n/2 old members have been cycled; then the leader marks itself exiting and
// Allocate returns once it holds nothing.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.gazette.dev/core/allocator"
	"go.gazette.dev/core/keyspace"
)

// batchOps bounds the operations of one etcd transaction (etcd's default --max-txn-ops is 128).
const batchOps = 128

type member struct {
	R int  `json:"R"`
	E bool `json:"E,omitempty"`
}

func (m member) ItemLimit() int  { return m.R }
func (m member) IsExiting() bool { return m.E }

type item struct {
	R int `json:"R"`
}

func (i item) DesiredReplication() int { return i.R }

// decoder reads members and items as JSON; an assignment's value is "" until the scenario marks it
// "consistent" (standing in for replicas that have synced).
type decoder struct{}

func (decoder) DecodeItem(_ string, raw *mvccpb.KeyValue) (allocator.ItemValue, error) {
	var v item
	return v, json.Unmarshal(raw.Value, &v)
}

func (decoder) DecodeMember(_, _ string, raw *mvccpb.KeyValue) (allocator.MemberValue, error) {
	var v member
	return v, json.Unmarshal(raw.Value, &v)
}

func (decoder) DecodeAssignment(_, _, _ string, _ int, raw *mvccpb.KeyValue) (allocator.AssignmentValue, error) {
	return string(raw.Value), nil
}

func consistent(_ allocator.Item, asn keyspace.KeyValue, _ keyspace.KeyValues) bool {
	return asn.Decoded.(allocator.Assignment).AssignmentValue.(string) == "consistent"
}

// write applies puts in transactions of at most batchOps, each guarded by its keys' expected state:
// absent (create), present (update) or at the given ModRevision (markConsistent). It returns how many
// transactions succeeded.
type guardedPut struct {
	key, value string
	cmp        clientv3.Cmp
}

func write(ctx context.Context, client *clientv3.Client, puts []guardedPut) (int, error) {
	var applied int
	for start := 0; start < len(puts); start += batchOps {
		end := min(start+batchOps, len(puts))
		var cmps []clientv3.Cmp
		var ops []clientv3.Op
		for _, p := range puts[start:end] {
			cmps = append(cmps, p.cmp)
			ops = append(ops, clientv3.OpPut(p.key, p.value))
		}
		resp, err := client.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return applied, err
		} else if resp.Succeeded {
			applied++
		}
	}
	return applied, nil
}

func memberKey(ks *keyspace.KeySpace, i int) string {
	zone := "zone-b"
	if i%5 == 0 || i%5 == 2 || i%5 == 4 {
		zone = "zone-a" // three in five: the larger zone
	}
	return allocator.MemberKey(ks, zone, fmt.Sprintf("m%05d", i))
}

func jsonOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

type result struct {
	Members       int     `json:"members"`
	Items         int     `json:"items"`
	Mode          string  `json:"mode"`
	Seconds       float64 `json:"seconds"`        // Allocate's whole run
	DriverSeconds float64 `json:"driver_seconds"` // of which in the scenario's steps (the test hook)
	Rounds        int     `json:"rounds"`
	Steps         int     `json:"steps"`
	StartRevision int64   `json:"start_revision"`
	EndRevision   int64   `json:"end_revision"`
}

func run(endpoint, root string, n, perMember int, downFirst bool, timeout time.Duration) (*result, error) {
	if n <= 0 || n%10 != 0 {
		return nil, fmt.Errorf("members must be a positive multiple of 10, not %d", n)
	} else if perMember <= 0 {
		return nil, fmt.Errorf("items per member must be positive, not %d", perMember)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 10 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("connecting to etcd %s: %w", endpoint, err)
	}
	defer client.Close()

	ks := allocator.NewAllocatorKeySpace(root, decoder{})
	leaderKey := allocator.MemberKey(ks, "zone-a", "leader")
	state := allocator.NewObservedState(ks, leaderKey, consistent)
	block, half, nItems := n/10, n/2, perMember*n
	out := &result{Members: n, Items: nItems, Mode: "up-first"}
	if downFirst {
		out.Mode = "down-first"
	}

	create := func(key string, v any) guardedPut {
		return guardedPut{key, jsonOf(v), clientv3.Compare(clientv3.Version(key), "=", 0)}
	}
	update := func(key string, v any) guardedPut {
		return guardedPut{key, jsonOf(v), clientv3.Compare(clientv3.Version(key), ">", 0)}
	}
	puts := []guardedPut{create(leaderKey, member{R: 1})}
	for i := 0; i < half; i++ {
		puts = append(puts, create(memberKey(ks, i), member{R: 1500}))
	}
	for i := 0; i < nItems; i++ {
		puts = append(puts, create(allocator.ItemKey(ks, fmt.Sprintf("i%05d", i)), item{R: 3}))
	}
	if _, err := write(ctx, client, puts); err != nil {
		return nil, fmt.Errorf("writing the scenario's members and items: %w", err)
	}

	nextBlock, nextDown, leaving := 0, downFirst, false
	var driver time.Duration
	var hookErr error
	hook := func(round int, idle bool) {
		out.Rounds = round + 1
		if !idle || hookErr != nil {
			return
		}
		began := time.Now()
		defer func() { driver += time.Since(began) }()

		var marks []guardedPut
		for _, kv := range ks.Prefixed(ks.Root + allocator.AssignmentsPrefix) {
			if string(kv.Raw.Value) == "" {
				k := string(kv.Raw.Key)
				marks = append(marks, guardedPut{k, "consistent",
					clientv3.Compare(clientv3.ModRevision(k), "=", kv.Raw.ModRevision)})
			}
		}
		if applied, err := write(ctx, client, marks); err != nil {
			hookErr = err
			return
		} else if applied != 0 || leaving {
			return // the allocator goes on from what changed
		}
		begin, end := block*nextBlock, block*(nextBlock+1)
		var step []guardedPut
		if begin == half {
			leaving = true // every old member has been cycled: the leader leaves
			step = append(step, update(leaderKey, member{R: 1, E: true}))
		} else if nextDown {
			for i := begin; i < end; i++ {
				step = append(step, update(memberKey(ks, i), member{R: 1500, E: true}))
			}
		} else {
			for i := half + begin; i < half+end; i++ {
				step = append(step, create(memberKey(ks, i), member{R: 1205}))
			}
		}
		if _, err := write(ctx, client, step); err != nil {
			hookErr = err
			return
		}
		out.Steps++
		if !leaving {
			nextDown = !nextDown
			if nextDown == downFirst {
				nextBlock++
			}
		}
	}

	if err := ks.Load(ctx, client, 0); err != nil {
		return nil, fmt.Errorf("loading the key space: %w", err)
	}
	out.StartRevision = ks.Header.Revision
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go func() { _ = ks.Watch(watchCtx, client) }()

	began := time.Now()
	err = allocator.Allocate(allocator.AllocateArgs{Context: ctx, Etcd: client, State: state, TestHook: hook})
	elapsed := time.Since(began)
	if hookErr != nil {
		return nil, fmt.Errorf("scenario step failed: %w", hookErr)
	} else if errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("not converged within %s (after %d steps)", timeout, out.Steps)
	} else if err != nil {
		return nil, fmt.Errorf("allocate: %w", err)
	}
	out.Seconds, out.DriverSeconds = elapsed.Seconds(), driver.Seconds()
	resp, err := client.Get(ctx, leaderKey)
	if err != nil {
		return nil, fmt.Errorf("reading the end revision: %w", err)
	}
	out.EndRevision = resp.Header.Revision
	return out, nil
}

func main() {
	endpoint := flag.String("etcd", "", "etcd client endpoint, e.g. http://127.0.0.1:2379 (required)")
	root := flag.String("root", "", "key space root for this run, e.g. /bench/alloc-10-up (required; must be empty)")
	n := flag.Int("members", 10, "members of the scenario (a multiple of 10)")
	perMember := flag.Int("items-per-member", 200, "items per member (Gazette's benchmark: 200)")
	downFirst := flag.Bool("down-first", false, "mark old members exiting before their replacements join")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up after this long")
	flag.Parse()
	if *endpoint == "" || *root == "" {
		fmt.Fprintln(os.Stderr, "allocbench: -etcd and -root are required")
		os.Exit(2)
	}
	res, err := run(*endpoint, *root, *n, *perMember, *downFirst, *timeout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "allocbench:", err)
		os.Exit(1)
	}
	fmt.Println(jsonOf(res))
}
