//! What `make demo` runs gives a sensible answer: the chat prompt about France's capital,
//! greedy, on SmolLM2-135M-Instruct Q4_1, answers with Paris and stops by itself.

mod common;

#[test]
fn demo_chat_answers_sensibly() {
    let Some(model) = common::model_path("SmolLM2-135M-Instruct.Q4_1.gguf") else {
        return;
    };
    let out = common::locus(&[
        "run",
        "-m",
        model.to_str().unwrap(),
        "--chat",
        "-p",
        "What is the capital of France? Answer in one sentence.",
        "-n",
        "64",
        "--temp",
        "0",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer = String::from_utf8(out.stdout).unwrap();
    assert!(answer.contains("Paris"), "answer: {answer:?}");
    assert!(
        !answer.contains("<|im_start|>") && !answer.contains("What is the capital"),
        "only the answer is printed: {answer:?}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("decode") && stderr.contains("tok/s"),
        "timing line on stderr: {stderr}"
    );
    let tokens: usize = stderr
        .split("decode ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        tokens < 64,
        "the model ends its turn by itself ({tokens} tokens)"
    );
}
