"""What Salton et al.'s released code trains: their own modules, run as their training script builds them.
Backs: docs/results.md, Salton section, "the authors' released code trains no attention".

The authors' TensorFlow 1 code (github.com/giancds/attentive_lm, commit 0242c42) keeps the attention memory
in a Python list inside the LSTM cell. Their training and validation graphs run the cell through
`tf.nn.dynamic_rnn`, which traces the cell once, so the list holds only its initial zero vector there; only
their test graph (a static loop over steps) attends over earlier states. This script builds the three graphs
with their unchanged cells.py, attention.py, utils.py and attentive_lm.py (TF 2 under tf.compat.v1, with
TF 1's names for three renamed things) and prints what each attends over, how far the validation and test
outputs of the same weights differ, and the training gradient of the attention's weights. Not part of
ctxlm: it needs TensorFlow, which ctxlm does not install (docs/results.md, Salton section):

    python -m venv /tmp/tf && /tmp/tf/bin/pip install tensorflow-cpu==2.16.1 tf-keras==2.16.0
    git clone https://github.com/giancds/attentive_lm /tmp/attentive_lm && git -C /tmp/attentive_lm checkout 0242c42
    TF_USE_LEGACY_KERAS=1 /tmp/tf/bin/python probes/salton_authors_code.py /tmp/attentive_lm
"""
import argparse
import sys
import types

import numpy as np


def load_authors_modules(repo: str):
    """Their modules, importable: `tensorflow` is tf.compat.v1 with TF 1's tf.contrib.rnn, DropoutWrapper._cell
    and nest.is_sequence; their utils.py, whose imports of attention/cells import utils back, runs with those
    two imports last."""
    import tensorflow as real_tf
    from tensorflow.python.util import nest

    tf = real_tf.compat.v1
    tf.disable_v2_behavior()
    tf.disable_v2_tensorshape()

    class DropoutWrapper(tf.nn.rnn_cell.DropoutWrapper):
        _cell = property(lambda self: self.cell)

    rnn = types.SimpleNamespace(**{k: getattr(tf.nn.rnn_cell, k) for k in dir(tf.nn.rnn_cell) if not k.startswith("_")})
    rnn.DropoutWrapper = DropoutWrapper
    tf.contrib = types.SimpleNamespace(rnn=rnn)
    nest.is_sequence = nest.is_nested
    sys.modules["tensorflow"] = tf
    sys.path.insert(0, repo)
    utils = types.ModuleType("utils")
    sys.modules["utils"] = utils
    with open(f"{repo}/utils.py", encoding="utf-8") as f:
        source = f.read()
    exec(source.replace("import attention\nimport cells\n", "") + "\nimport attention\nimport cells\n", utils.__dict__)
    import attentive_lm
    return tf, utils, attentive_lm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repo", help="a checkout of giancds/attentive_lm at 0242c42")
    tf, utils, attentive_lm = load_authors_modules(parser.parse_args().repo)
    batch, steps, size = 2, 6, 4
    x = tf.placeholder(tf.float32, [batch, steps, size])
    lengths = tf.constant([steps] * batch, tf.float32)
    init = tf.random_uniform_initializer(-0.5, 0.5, seed=1)
    outputs = {}
    # as train_attentive_lm.py: mtrain (dynamic_rnn, dropout), mvalid (dynamic_rnn), mtest (static loop)
    for name, training, static in (("train", True, False), ("valid", False, False), ("test", False, True)):
        with tf.variable_scope("Model", reuse=None if name == "train" else True, initializer=init):
            cell = utils.build_lm_layers(2, size, is_training=training, decoding_function_name="single",
                                         keep_prob=0.5, keep_attention_weights=static)
            outputs[name], _, _ = attentive_lm.attentive_lm(x, cell, lengths, is_training=training,
                                                            keep_attention_weights=static)
            attention_cell = cell._cells[-1]._cell if training else cell._cells[-1]
            slots = [w.shape.as_list()[1] for w in attention_cell.attention_weights]
            print(f"{name} graph: attention built {len(slots)} time(s), over {slots} slot(s)")
    variables = tf.trainable_variables()
    gradients = tf.gradients(tf.reduce_sum(outputs["train"] ** 2), variables)
    with tf.Session() as session:
        session.run(tf.global_variables_initializer())
        feed = {x: np.random.RandomState(0).uniform(-1, 1, (batch, steps, size))}
        valid, test, grads = session.run([outputs["valid"], outputs["test"], gradients], feed)
    print("max |valid - test| output at steps 1..6, same weights:", [f"{v:.4f}" for v in np.abs(valid - test).max(axis=(0, 2))])
    for variable, grad in zip(variables, grads):
        if "score_salton" in variable.name:
            print(f"training gradient of {variable.name.split('/')[-1]}: max |g| = {np.abs(grad).max():.3g}")


if __name__ == "__main__":
    main()
