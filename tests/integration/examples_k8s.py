# SPDX-License-Identifier: MIT
"""examples_k8s.py DIR - check the Kubernetes examples of DIR
(examples/k8s): every manifest parses (python3-yaml), every object has
apiVersion, kind and metadata.name, and the fields each layout of
DIR/README.md depends on hold. Prints one line per problem; exit 1 if
any, 0 otherwise."""
import glob
import os
import re
import sys

import yaml

bad = []


def say(where, msg):
    bad.append("%s: %s" % (where, msg))


def pod_spec(obj):
    if obj["kind"] == "Pod":
        return obj.get("spec") or {}
    return ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}


def containers(spec):
    return (spec.get("initContainers") or []) + (spec.get("containers") or [])


def privileged(c):
    return bool((c.get("securityContext") or {}).get("privileged"))


def strings(where, what, lst):
    """a command line is a list of strings: a ': ' in a plain YAML
    scalar makes a mapping of it, which Kubernetes refuses"""
    for a in lst or []:
        if not isinstance(a, str):
            say(where, "%s: %r is not a string" % (what, a))


def argv(c):
    return " ".join(str(a) for a in (c.get("command") or []) +
                    (c.get("args") or []))


def volume(spec, name):
    for v in spec.get("volumes") or []:
        if v.get("name") == name:
            return v
    return {}


def check_common(where, spec):
    """mount propagation: Bidirectional only in a privileged container
    (the API server refuses it otherwise); HostToContainer readers are
    not privileged; both on hostPath volumes."""
    for c in containers(spec):
        strings(where, c["name"], (c.get("command") or []) +
                (c.get("args") or []))
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            ex = (c.get(probe) or {}).get("exec") or {}
            strings(where, "%s %s" % (c["name"], probe), ex.get("command"))
        for m in c.get("volumeMounts") or []:
            p = m.get("mountPropagation")
            if p is None:
                continue
            if p not in ("None", "HostToContainer", "Bidirectional"):
                say(where, "%s: mountPropagation %r" % (c["name"], p))
            if p == "Bidirectional" and not privileged(c):
                say(where, "%s: Bidirectional without privileged" % c["name"])
            if p == "HostToContainer" and privileged(c):
                say(where, "%s: a reader is privileged" % c["name"])
            if "hostPath" not in volume(spec, m.get("name")):
                say(where, "%s: %s propagates a volume that is not a "
                    "hostPath" % (c["name"], m.get("name")))


def check_daemonset(where, obj, spec):
    us = (obj["spec"].get("updateStrategy") or {})
    ru = us.get("rollingUpdate") or {}
    if us.get("type") != "RollingUpdate" or not ru.get("maxSurge") or \
            ru.get("maxUnavailable") != 0:
        say(where, "an upgrade must surge (maxSurge >= 1, maxUnavailable: "
            "0): the new pod takes over from the old one: %r" % us)
    if spec.get("hostPID") is not True:
        say(where, "hostPID: the readiness probe compares host pids")
    ds = [c for c in containers(spec) if "/usr/bin/dcrfs" in argv(c)]
    if len(ds) != 1:
        say(where, "no container runs /usr/bin/dcrfs")
        return
    c = ds[0]
    if "--takeover" not in argv(c):
        say(where, "the container never runs dcrfs --takeover")
    if not privileged(c):
        say(where, "the mounting container is not privileged")
    mounts = {m["name"]: m for m in c.get("volumeMounts") or []}
    if not any(m.get("mountPropagation") == "Bidirectional"
               for m in mounts.values()):
        say(where, "the mount is not shared with the host (Bidirectional)")
    # dcrfs refuses a mount point that is a mount already, as the
    # hostPath volume's own path is in the container: below it, then
    mnt = re.search(r"\bMNT=(\S+)", argv(c))
    if not mnt or not any(
            m.get("mountPropagation") == "Bidirectional" and
            mnt.group(1).startswith(m["mountPath"].rstrip("/") + "/")
            for m in mounts.values()):
        say(where, "the mount point (MNT=) is not below the Bidirectional "
            "volume: %s" % (mnt.group(1) if mnt else "no MNT="))
    cache = [m for m in mounts.values()
             if m.get("mountPath") == "/var/cache/dcrfs"]
    if not cache or "hostPath" not in volume(spec, cache[0]["name"]):
        say(where, "the cache directory (the handover socket) is not a "
            "hostPath the old and the new pod share")
    if not c.get("readinessProbe"):
        say(where, "no readiness probe: the old pod would go before the "
            "takeover")


def check_pod(where, name, spec):
    cs = containers(spec)
    helper = [c for c in cs if "fuse-fd-helper.py" in argv(c)]
    if name == "fd-helper-pod.yaml":
        if len(helper) != 1 or "{fd}" not in argv(helper[0]) or \
                "/usr/bin/dcrfs" not in argv(helper[0]):
            say(where, "the helper does not run dcrfs on {fd}")
        elif not privileged(helper[0]):
            say(where, "the helper is not privileged (mount(2))")
        else:
            a = [str(x) for x in helper[0].get("args") or []]
            vols = [m["mountPath"].rstrip("/") + "/"
                    for m in helper[0].get("volumeMounts") or []
                    if m.get("mountPropagation") == "Bidirectional"]
            if not a or not any(a[0].startswith(v) for v in vols):
                say(where, "the helper's mount point is not below its "
                    "Bidirectional volume: %r" % (a[:1],))
    elif name == "reader-pod.yaml":
        for c in cs:
            if privileged(c):
                say(where, "%s is privileged without a mount" % c["name"])
            for m in c.get("volumeMounts") or []:
                if m.get("mountPropagation"):
                    say(where, "%s: a mount propagates" % c["name"])
        if not any(argv(c).startswith("/usr/bin/dcrfs-ctl") and
                   " export " in argv(c) for c in cs):
            say(where, "no dcrfs-ctl export")
        if any(v.get("hostPath", {}).get("path") == "/dev/fuse"
               for v in spec.get("volumes") or []):
            say(where, "/dev/fuse in a pod that needs no mount")
    elif name == "rollout-pod.yaml":
        if not any(m.get("mountPropagation") == "HostToContainer"
                   for c in cs for m in c.get("volumeMounts") or []):
            say(where, "the rollout pod does not see the node's mount "
                "(HostToContainer)")


def main(d):
    files = sorted(glob.glob(os.path.join(d, "*.yaml")))
    if not files:
        say(d, "no manifests")
    readme = open(os.path.join(d, "README.md")).read()
    kinds = set()
    for f in files:
        name = os.path.basename(f)
        if name not in readme:
            say(name, "not in README.md")
        try:
            docs = [x for x in yaml.safe_load_all(open(f)) if x is not None]
        except yaml.YAMLError as e:
            say(name, "does not parse: %s" % e)
            continue
        if not docs:
            say(name, "empty")
        for i, obj in enumerate(docs):
            where = "%s[%d]" % (name, i)
            if not isinstance(obj, dict):
                say(where, "not a mapping")
                continue
            for k in ("apiVersion", "kind"):
                if not isinstance(obj.get(k), str) or not obj[k]:
                    say(where, "no %s" % k)
            if not (obj.get("metadata") or {}).get("name"):
                say(where, "no metadata.name")
            kind = obj.get("kind")
            kinds.add(kind)
            want = {"DaemonSet": "apps/v1", "Pod": "v1", "Namespace": "v1"}
            if kind in want and obj.get("apiVersion") != want[kind]:
                say(where, "%s is %s, not %r" % (kind, want[kind],
                                                 obj.get("apiVersion")))
            if kind not in ("DaemonSet", "Pod"):
                continue
            spec = pod_spec(obj)
            if not containers(spec):
                say(where, "no containers")
            check_common(where, spec)
            if kind == "DaemonSet":
                check_daemonset(where, obj, spec)
            else:
                check_pod(where, name, spec)
    if "DaemonSet" not in kinds:
        say(d, "no DaemonSet")
    for line in bad:
        print(line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
