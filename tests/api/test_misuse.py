"""Every misuse of the options and the feeds is a typed error whose message names the problem."""
from __future__ import annotations

import math

import numpy as np
import pytest

import nnhal
from nnhal.errors import DeviceError, InputError, OptionsError

X = np.zeros((2, 4), np.float32)


@pytest.mark.parametrize("kwargs, error, text", [
    ({"devices": "cpu"}, OptionsError, "devices must be a list of names"),
    ({"devices": []}, OptionsError, "devices is empty"),
    ({"devices": ["cpu", 3]}, OptionsError, "devices must be a list of names"),
    ({"deny": {"relu1": "vnpu"}}, OptionsError, r"deny\['relu1'\] must be a list of names"),
    ({"deny": ["relu1"]}, OptionsError, "deny must be a dict"),
    ({"pins": {"relu1": 1}}, OptionsError, "pins must map node names to device names"),
    ({"pins": {"relu1": "vnpu"}}, DeviceError, "not in the context's devices"),
    ({"device_options": {"cpu": 3}}, OptionsError, r"device_options\['cpu'\] must be a dict"),
    ({"mixed_tolerance": float("nan")}, OptionsError, "mixed_tolerance must be a finite number"),
    ({"mixed_tolerance": -0.1}, OptionsError, "mixed_tolerance must be a finite number"),
    ({"mixed_tolerance": math.inf}, OptionsError, "mixed_tolerance must be a finite number"),
    ({"num_thread": -1}, OptionsError, "num_thread"),
    ({"num_thread": True}, OptionsError, "num_thread"),
    ({"strict": "yes"}, OptionsError, "strict must be True or False"),
    ({"precision": "int4"}, OptionsError, "precision must be one of"),
    ({"min_group_size": 0}, OptionsError, "min_group_size"),
])
def test_bad_session_options(relu_add_model, kwargs, error, text):
    with pytest.raises(error, match=text):
        with nnhal.Session(relu_add_model, **kwargs) as s:
            s.run({"x": X})


@pytest.mark.parametrize("table, text", [
    ({"pins": {"relu9": "cpu"}}, "pins names 'relu9', which is neither a node nor an op type of the model; "
                                 "did you mean 'relu[12]'"),
    ({"deny": {"add": ["cpu"]}}, "deny names 'add', which is neither a node nor an op type of the model; "
                                 "did you mean 'add1'"),
])
def test_pins_and_denials_of_unknown_nodes(relu_add_model, table, text):
    with nnhal.Session(relu_add_model, **table) as s:
        with pytest.raises(OptionsError, match=text):
            s.run({"x": X})


def test_pins_by_op_type_are_accepted(relu_add_model):
    with nnhal.Session(relu_add_model, pins={"Relu": "cpu"}, deny={"Add": []}) as s:
        assert s.run({"x": X})[0].shape == (2, 4)


def test_keep_fp32_takes_names_only():
    with pytest.raises(OptionsError, match="keep_fp32 must be a set of node names"):
        nnhal.Options(keep_fp32="relu1")
    assert nnhal.Options(keep_fp32=["relu1"]).keep_fp32 == frozenset({"relu1"})


@pytest.mark.parametrize("feeds, text", [
    (np.zeros((2, 4), np.float32), "feeds must be a dict"),
    ({"x": object()}, "expects dtype float32"),
    ({}, r"inputs not given: \['x'\]"),
    ({"y": X}, "no input named 'y'"),
    ([X, X], "input index 1 is out of range"),
])
def test_bad_feeds(relu_add_model, feeds, text):
    with nnhal.Session(relu_add_model) as s:
        with pytest.raises(InputError, match=text):
            s.run(feeds)
        np.testing.assert_array_equal(s.run({"x": X})[0].shape, (2, 4))   # the session still works


def test_prerun_needs_options(relu_add_model):
    ctx = nnhal.create_context("misuse", devices=["cpu"])
    g = nnhal.create_graph(ctx, "onnx", relu_add_model)
    with pytest.raises(OptionsError, match="needs an nnhal.Options"):
        nnhal.prerun_graph(g, {"precision": "fp16"})
    nnhal.destroy_graph(g)
