//! A wildcard POP's latency when only the last of N queues of the
//! namespace has messages, against a POP of that queue by name.

use super::{check, rows, Proxy, Site};
use crate::setup::BoxError;

pub async fn figures(site: &Site, quick: bool) -> Result<(), BoxError> {
    let proxy = Proxy::start(site, "wild_figures").await?;
    let c = proxy.connect().await?;
    let (counts, pops): (&[usize], usize) = if quick {
        (&[1, 10], 60)
    } else {
        (&[1, 10, 100], 250)
    };
    for &n in counts {
        let ns = format!("ns{n}");
        for q in 0..n {
            c.batch_execute(&format!(
                "CREATE QUEUE {ns}_q{q} WITH (namespace = '{ns}', priority = {})",
                n - q
            ))
            .await?;
        }
        let last = format!("{ns}_q{}", n - 1);
        let values: Vec<String> = (0..pops * 2 + 100)
            .map(|i| format!("('{{\"q\":\"{last}\",\"i\":{i}}}')"))
            .collect();
        rows(
            &c,
            &format!("PUSH INTO {last} VALUES {}", values.join(", ")),
        )
        .await?;
        for (label, sql) in [
            ("by name", format!("POP FROM {last} AUTO ACK")),
            ("wildcard", format!("POP FROM NAMESPACE {ns} AUTO ACK")),
        ] {
            let mut took = Vec::new();
            for i in 0..pops {
                let began = std::time::Instant::now();
                let got = rows(&c, &sql).await?;
                if i >= 10 {
                    took.push(began.elapsed());
                }
                check(got.len() == 1, || format!("{sql}: {} rows", got.len()))?;
            }
            took.sort();
            println!("{n} queues, {label}: median {:?}", took[took.len() / 2]);
        }
    }
    Ok(())
}
