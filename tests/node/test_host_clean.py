"""The node tier leaves the host exactly as it found it (runs after every other node scenario)."""

from __future__ import annotations

import pytest

from tests.node.conftest import NodeCluster, figure

pytestmark = pytest.mark.node


def test_host_left_as_found(node_session: NodeCluster) -> None:
    """Tear the node down now and compare the host with the snapshot taken before it started:
    no mount, path, sysctl, cgroup or test dir left over. The undo list shows the kubelet's real
    side effects were there to undo (the root-dir bind mount, vm.overcommit_memory)."""
    undone = node_session.teardown()
    figure("teardown: host changes undone", len(undone))
    print("\n".join(undone))
    assert node_session.host.differences() == {}
    assert any(line.startswith("umount ") and line.endswith("/kubelet") for line in undone), undone
    assert any(line.startswith("sysctl vm.overcommit_memory=") for line in undone) or (
        node_session.host.sysctls["vm/overcommit_memory"] == "1"
    ), undone
