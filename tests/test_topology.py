"""The VM topology file: this machine's GPUs under one flat host bridge, no NUMA affinity, the recorded link."""
import xml.etree.ElementTree as ET

import pytest

from helpers.interconnect import topology as tp


def test_recorded_link_is_the_vm_gpus_physical_link():
    link = tp.recorded_vm_link()
    assert (link.generation, link.width, link.speed) == (5, 16, "32.0 GT/s PCIe")
    assert link.source.startswith("seed-")


def test_every_gpu_sits_under_one_host_bridge_of_a_cpu_without_affinity():
    xml = tp.vm_topology_xml(["00000000:3B:00.0", "00000000:5E:00.0", "0000:86:00.0"], tp.Link(5, 16), sm=90)
    root = ET.fromstring(xml)
    cpus = root.findall("cpu")
    assert len(cpus) == 1 and cpus[0].get("numaid") == "-1" and cpus[0].get("affinity") == ""
    bridges = cpus[0].findall("pci")
    assert len(bridges) == 1
    gpus = bridges[0].findall("pci")
    assert [g.get("busid") for g in gpus] == ["0000:3b:00.0", "0000:5e:00.0", "0000:86:00.0"]
    assert all(g.get("link_speed") == "32.0 GT/s PCIe" and g.get("link_width") == "16" for g in gpus)
    assert [g.find("gpu").get("dev") for g in gpus] == ["0", "1", "2"]
    assert all(g.find("gpu").get("sm") == "90" and g.find("gpu").get("gdr") == "0" for g in gpus)


@pytest.mark.parametrize("bad,match", [
    (["3B:00.0"], "malformed"), (["0000:3b:00.0", "0000:3B:00.0"], "duplicate"), ([], "no GPUs")])
def test_bad_bus_ids_are_refused(bad, match):
    with pytest.raises(tp.TopologyError, match=match):
        tp.vm_topology_xml(bad, tp.Link(5, 16))


def test_bad_links_are_refused():
    with pytest.raises(tp.TopologyError, match="generation"):
        tp.Link(9, 16)
    with pytest.raises(tp.TopologyError, match="width"):
        tp.Link(5, 12)
    with pytest.raises(tp.TopologyError, match="cannot read"):
        tp.parse_link("NVLink 4")


def test_written_file_round_trips(tmp_path):
    p = tp.write(tp.vm_topology_xml(["0000:01:00.0"], tp.Link(4, 8)), tmp_path / "t" / "vm.xml")
    assert ET.parse(p).getroot().tag == "system"


def test_without_a_gpu_there_are_no_bus_ids():
    assert tp.bus_ids_of_this_machine() == []
