"""DeepSpeed 0.19's launcher front end (``deepspeed/launcher/runner.py``): ``parse_args`` with
the real parser's options for choosing the world and the script, and its defaults."""

import argparse

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
