"""Render the kustomizations under deploy/kubernetes the way `kubectl kustomize` does, for
the features they use: resources (files and directories), namespace, labels (metadata
only), JSON 6902 patches (applied with the real `jsonpatch` library) and `images:` (a
container's image name, tag or digest set without editing the manifest). No kustomize
binary is available from the registries CI reaches; anything else in a kustomization
fails loudly here instead of being ignored."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonpatch
import yaml

SUPPORTED = {"apiVersion", "kind", "namespace", "labels", "resources", "patches", "images"}
IMAGE_FIELDS = {"name", "newName", "newTag", "digest"}
# Kinds that live in no namespace: kustomize leaves their namespace alone.
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"}


def load_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def kustomization(folder: Path) -> dict[str, Any]:
    doc = yaml.safe_load((folder / "kustomization.yaml").read_text())
    unknown = set(doc) - SUPPORTED
    assert not unknown, f"{folder}: kustomization uses {unknown}, unknown to this renderer"
    assert doc["kind"] == "Kustomization"
    return dict(doc)


def referenced_files(folder: Path) -> set[Path]:
    return {(folder / r).resolve() for r in kustomization(folder).get("resources", [])}


def render(folder: Path) -> list[dict[str, Any]]:
    k = kustomization(folder)
    objects: list[dict[str, Any]] = []
    for ref in k.get("resources", []):
        path = (folder / ref).resolve()
        assert path.exists(), f"{folder}/kustomization.yaml: {ref} does not exist"
        objects.extend(render(path) if path.is_dir() else copy.deepcopy(load_docs(path)))
    for entry in k.get("labels", []):
        unknown = set(entry) - {"pairs"}
        assert not unknown, f"{folder}: labels options {unknown} not supported here"
        for obj in objects:
            obj.setdefault("metadata", {}).setdefault("labels", {}).update(entry["pairs"])
    if "namespace" in k:
        for obj in objects:
            if obj["kind"] == "Namespace":
                continue
            if obj["kind"] not in CLUSTER_SCOPED:
                obj["metadata"]["namespace"] = k["namespace"]
    for patch in k.get("patches", []):
        target = patch["target"]
        ops = yaml.safe_load(patch["patch"])
        hits = [o for o in objects if o["kind"] == target["kind"]
                and o["metadata"]["name"] == target["name"]]
        assert hits, f"{folder}: patch target {target} matches nothing"
        for obj in hits:
            patched = jsonpatch.apply_patch(obj, ops)
            obj.clear()
            obj.update(patched)
    set_images(objects, k.get("images", []), folder)
    return objects


def split_image(image: str) -> tuple[str, str | None, str | None]:
    """name, tag, digest of a container image reference, as kustomize reads it: the tag
    follows the last `:` after the last `/` (a registry's port is part of the name)."""
    name, _, digest = image.partition("@")
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        return name[:colon], name[colon + 1:], digest or None
    return name, None, digest or None


def set_images(objects: list[dict[str, Any]], images: list[dict[str, str]],
               where: Path) -> None:
    """kustomize's images transformer: every container (and init container) of a pod
    template whose image name is an entry's `name` gets its newName, newTag or digest
    (a digest replaces the tag)."""
    for entry in images:
        unknown = set(entry) - IMAGE_FIELDS
        assert not unknown and "name" in entry, f"{where}: images entry {entry}"
        assert not ("newTag" in entry and "digest" in entry), f"{where}: tag and digest"
    for obj in objects:
        spec = obj.get("spec", {})
        pod = spec.get("template", {}).get("spec", spec if obj["kind"] == "Pod" else {})
        for container in [*pod.get("initContainers", []), *pod.get("containers", [])]:
            name, tag, digest = split_image(container["image"])
            for entry in images:
                if entry["name"] != name:
                    continue
                name = entry.get("newName", name)
                if "newTag" in entry:
                    tag, digest = str(entry["newTag"]), None
                if "digest" in entry:
                    tag, digest = None, entry["digest"]
            container["image"] = name + (f":{tag}" if tag else "") + (
                f"@{digest}" if digest else "")
