#!/usr/bin/env python3
"""Load a Harness Lab export the way a trainer would index it, using only the standard library.

    python3 read_exports.py trainingtrace|trl|verl FILE

Checks the shapes TRL's rollout_func and harness worker and veRL's agent loop rely on (docs/exports.md),
prints a JSON summary on success, and exits 1 naming the row and the rule on the first violation.
"""
import json
import math
import sys

TURN_KEYS = {"node_id", "prompt_token_ids", "completion_token_ids", "per_token_logps", "loss_mask", "request", "response", "metadata"}


class Violation(Exception):
    pass


def need(cond, where, rule):
    if not cond:
        raise Violation(f"{where}: {rule}")


def is_id(x):
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def is_float(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def read_lines(path):
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                rows.append(json.loads(line))
    return rows


def read_manifest(path):
    with open(path + ".manifest.json", encoding="utf-8") as f:
        return json.load(f)


def check_trainingtrace(rows, manifest):
    """TRL's TrainingTrace validity rules (docs/trainer-contracts.md §1.2), with the reward beside the trace."""
    rewards = {"null": 0, "zero": 0, "positive": 0}
    n_turns = 0
    for i, row in enumerate(rows):
        where = f"line {i + 1} ({row.get('rollout_id')})"
        need("reward" in row, where, "reward key present beside the trace")
        r = row["reward"]
        need(r is None or is_float(r), where, "reward is a finite number or null")
        rewards["null" if r is None else "zero" if r == 0 else "positive"] += 1
        trace = row["trace"]
        need(set(trace) == {"schema_version", "turns"}, where, f"trace has exactly schema_version and turns, got {sorted(trace)}")
        need(trace["schema_version"] == 1, where, "schema_version 1")
        turns = trace["turns"]
        need(isinstance(turns, list) and turns, where, "turns is a non-empty list")
        ids = [t["node_id"] for t in turns]
        need(len(set(ids)) == len(ids), where, "node ids unique")
        need(len(row["turn_policy_versions"]) == len(turns), where, "one policy version per turn")
        for t in turns:
            tw = f"{where} turn {t.get('node_id')}"
            need(set(t) == TURN_KEYS, tw, f"turn keys exactly {sorted(TURN_KEYS)}, got {sorted(t)}")
            p, c, lp, mask = t["prompt_token_ids"], t["completion_token_ids"], t["per_token_logps"], t["loss_mask"]
            need(len(p) > 0, tw, "prompt non-empty")
            need(all(is_id(x) for x in p) and all(is_id(x) for x in c), tw, "ids are non-negative integers")
            need(len(c) > 0, tw, "kept turns have a non-empty completion")
            need(len(lp) == len(c), tw, "one logprob per completion token")
            need(all(is_float(x) and x <= 0 for x in lp), tw, "logprobs finite and <= 0")
            need(len(mask) == len(p) + len(c), tw, "loss_mask covers prompt + completion")
            need(all(m in (0, 1) and not isinstance(m, bool) for m in mask), tw, "mask is 0/1")
            need(all(m == 0 for m in mask[: len(p)]), tw, "prompt part of loss_mask is 0")
            need(isinstance(t["request"].get("messages"), list), tw, "request.messages is a list")
            need(t["request"].get("tools") is None or isinstance(t["request"]["tools"], list), tw, "request.tools is a list or null")
            ch = t["response"].get("choices")
            need(isinstance(ch, list) and ch and "message" in ch[0] and "finish_reason" in ch[0], tw, "response.choices[0] has message and finish_reason")
            need(isinstance(t["metadata"], dict), tw, "metadata is an object")
            n_turns += 1
    return {"rows": len(rows), "turns": n_turns, "rewards": rewards}


def check_trl(rows, manifest):
    """What GRPOTrainer does with rollout_func's output: required keys, per-token alignment, rewards viewed (-1, G)."""
    G = manifest["grouping"]["rows_per_group"]
    need(isinstance(G, int) and G >= 2, "manifest", "grouping.rows_per_group is num_generations")
    output = {k: [row[k] for row in rows] for k in rows[0]} if rows else {}
    for key in ("prompt_ids", "completion_ids", "logprobs"):
        need(key in output, "output", f"rollout_func must return {key}")
    need(len(rows) % G == 0, "output", f"{len(rows)} rows is not a multiple of num_generations={G}")
    for i, row in enumerate(rows):
        where = f"row {i} ({row['rollout_id']})"
        p, c, lp, env = row["prompt_ids"], row["completion_ids"], row["logprobs"], row["env_mask"]
        need(p and all(is_id(x) for x in p), where, "prompt_ids non-empty integer ids")
        need(c and all(is_id(x) for x in c), where, "completion_ids non-empty integer ids")
        need(len(lp) == len(c), where, "logprobs has one entry per completion token")
        need(len(env) == len(c), where, "env_mask has one entry per completion token")
        need(all(e in (0, 1) for e in env) and sum(env) > 0, where, "env_mask is 0/1 with at least one model token")
        need(all(is_float(x) and x <= 0 for x in lp), where, "logprobs finite and <= 0")
        need(all(x == 0 for x, e in zip(lp, env) if e == 0), where, "environment tokens carry logprob 0.0")
        need(is_float(row["reward"]), where, "reward is a finite number (never null, never NaN)")
    groups = [rows[k : k + G] for k in range(0, len(rows), G)]
    seen = set()
    std_zero = 0
    for gi, g in enumerate(groups):
        gid = g[0]["group_id"]
        need(all(r["group_id"] == gid for r in g), f"group {gi}", "a block of num_generations rows shares one group_id")
        need(gid not in seen, f"group {gi}", f"group {gid} appears in two places (groups must be consecutive)")
        seen.add(gid)
        rewards = [r["reward"] for r in g]
        mean = sum(rewards) / G
        if all(r == mean for r in rewards):
            std_zero += 1
    return {"rows": len(rows), "groups": len(groups), "num_generations": G, "groups_std_zero": std_zero, "group_ids": [g[0]["group_id"] for g in groups]}


def check_verl(rows, manifest):
    """veRL's agent-loop rows: keys {uid}_{session}_{index} parsed like verl.utils.trajectory, reward on the final row."""
    sessions = {}
    for i, row in enumerate(rows):
        where = f"row {i} ({row.get('key')})"
        for k in ("prompt_ids", "response_ids", "response_mask", "response_logprobs", "reward_score", "num_turns", "uid", "extra_fields", "loss_weight"):
            need(k in row, where, f"AgentLoopOutput field {k} present")
        need(row["prompt_ids"] and all(is_id(x) for x in row["prompt_ids"]), where, "prompt_ids non-empty")
        n = len(row["response_ids"])
        need(n > 0 and len(row["response_mask"]) == n and len(row["response_logprobs"]) == n, where, "response_ids, response_mask and response_logprobs have equal lengths")
        need(all(m in (0, 1) for m in row["response_mask"]) and sum(row["response_mask"]) > 0, where, "response_mask 0/1 with model tokens")
        need(all(is_float(x) and x <= 0 for x in row["response_logprobs"]), where, "response_logprobs finite and <= 0")
        need(is_float(row["loss_weight"]) and row["loss_weight"] > 0, where, "loss_weight finite and positive")
        need(isinstance(row["num_turns"], int) and row["num_turns"] > 0, where, "num_turns positive")
        parts = row["key"].rsplit("_", 2)
        need(len(parts) == 3, where, "key has the form {uid}_{session}_{index}")
        session, index = "_".join(parts[:2]), int(parts[2])
        need(parts[0] == row["uid"] or row["key"].startswith(row["uid"] + "_"), where, "key starts with the uid")
        need(row["extra_fields"]["segment_index"] == index, where, "extra_fields.segment_index equals the key's index")
        sessions.setdefault(session, []).append((index, row))
    finals_per_uid = {}
    for session, segs in sessions.items():
        segs.sort(key=lambda s: s[0])
        need([s[0] for s in segs] == list(range(len(segs))), session, "segment indices are 0..N-1")
        final = segs[-1][1]
        need(final["extra_fields"]["trajectory_role"] == "final", session, "the highest index is trajectory_role final")
        need(is_float(final["reward_score"]), session, "the final segment carries the reward")
        for _, r in segs[:-1]:
            need(r["extra_fields"]["trajectory_role"] == "intermediate" and r["reward_score"] is None, session, "earlier segments are intermediate without a reward")
        need(abs(sum(r["loss_weight"] for _, r in segs) - 1) < 1e-9, session, "loss weights of a rollout sum to 1 (1/N each)")
        finals_per_uid.setdefault(final["uid"], []).append(final["reward_score"])
    for uid, rs in finals_per_uid.items():
        need(len(rs) >= 2, uid, "a uid group has at least two rollouts")
    return {"rows": len(rows), "sessions": len(sessions), "uids": len(finals_per_uid), "multi_segment_sessions": sum(1 for s in sessions.values() if len(s) > 1)}


def main(argv):
    if len(argv) != 3 or argv[1] not in ("trainingtrace", "trl", "verl"):
        print(__doc__, file=sys.stderr)
        return 2
    fmt, path = argv[1], argv[2]
    rows = read_lines(path)
    manifest = read_manifest(path)
    try:
        need(manifest["format"] == fmt, "manifest", f"format {manifest['format']} != {fmt}")
        need(manifest["counts"]["rows"] == len(rows), "manifest", f"counts.rows {manifest['counts']['rows']} != {len(rows)} lines")
        summary = {"trainingtrace": check_trainingtrace, "trl": check_trl, "verl": check_verl}[fmt](rows, manifest)
    except Violation as v:
        print(f"read_exports: {fmt} {path}: {v}", file=sys.stderr)
        return 1
    print(json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
