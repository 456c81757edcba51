"""DeepSpeed 0.19's launcher front end (``deepspeed/launcher/runner.py``): ``parse_args`` with
the real parser's options for choosing the world and the script, and its defaults; and the
functions its ``main`` works out the hosts and GPUs with (a hostfile's ``host slots=N`` lines,
a ``host:slot,slot@host`` filter, the cut to ``--num_nodes`` hosts and ``--num_gpus`` GPUs)."""

import argparse
import collections
import os
import re

DLTS_HOSTFILE = "/job/hostfile"
TORCH_DISTRIBUTED_DEFAULT_PORT = 29500


def parse_args(args=None):
    parser = argparse.ArgumentParser(description="DeepSpeed runner")
    parser.add_argument("-H", "--hostfile", type=str, default=DLTS_HOSTFILE)
    parser.add_argument("-i", "--include", type=str, default="")
    parser.add_argument("-e", "--exclude", type=str, default="")
    parser.add_argument("--num_nodes", type=int, default=-1)
    parser.add_argument("--num_gpus", "--num_accelerators", type=int, default=-1)
    parser.add_argument("--master_port", default=TORCH_DISTRIBUTED_DEFAULT_PORT, type=int)
    parser.add_argument("--master_addr", default="", type=str)
    parser.add_argument("--node_rank", default=-1, type=int)
    parser.add_argument("--launcher", default="pdsh", type=str)
    parser.add_argument("--module", action="store_true")
    parser.add_argument("--no_python", action="store_true")
    parser.add_argument("--no_local_rank", action="store_true")
    parser.add_argument("--no_ssh", action="store_true")
    parser.add_argument("user_script", type=str)
    parser.add_argument("user_args", nargs=argparse.REMAINDER)
    return parser.parse_args(args=args)


def fetch_hostfile(hostfile_path):
    if not os.path.isfile(hostfile_path):
        return None
    pool = collections.OrderedDict()
    with open(hostfile_path) as lines:
        for read in lines:
            line = read.strip()
            if not line or line.startswith("#"):
                continue
            match = re.search(r"^(\S+)\s+slots=(\d+)", line)
            if match is None:
                raise ValueError(f"Hostfile contains a bad entry: {line}")
            pool[match.group(1)] = int(match.group(2))
    return pool


def parse_inclusion_exclusion(resource_pool, inclusion, exclusion):
    hosts = collections.OrderedDict((h, list(range(n))) for h, n in resource_pool.items())
    if not inclusion and not exclusion:
        return hosts
    named = collections.OrderedDict()
    for node in (inclusion or exclusion).split("@"):
        host, _, slots = node.partition(":")
        if host not in hosts:
            raise ValueError(f"Hostname '{host}' not found in hostfile")
        chosen = [int(s) for s in slots.split(",")] if slots else list(hosts[host])
        for slot in chosen:
            if slot not in hosts[host]:
                raise ValueError(f"No slot '{slot}' specified on host '{host}'")
        named[host] = chosen
    if inclusion:
        kept = {h: named[h] for h in hosts if h in named}
    else:
        kept = {h: [s for s in slots if s not in named.get(h, [])] for h, slots in hosts.items()}
    return collections.OrderedDict((h, s) for h, s in kept.items() if s)


def apply_num_nodes_and_gpus(active_resources, num_nodes, num_gpus):
    hosts = list(active_resources.items())
    if num_nodes > 0:
        hosts = hosts[:num_nodes]
    if num_gpus > 0:
        hosts = [(h, list(range(num_gpus))) for h, _ in hosts]
    return collections.OrderedDict(hosts)
