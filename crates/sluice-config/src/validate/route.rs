//! `[[route]]`: targets, fallbacks, retry and outlier settings.

use super::*;

pub(super) fn route_config(
    path: &str,
    raw: RawRoute,
    ups: &[UpstreamConfig],
    default_mode: KeyMode,
    defined_guardrails: &[crate::GuardrailConfig],
    ctx: &mut Ctx<'_>,
) -> Result<RouteConfig, ConfigError> {
    let RawRoute {
        name,
        models,
        upstream,
        targets,
        fallbacks,
        on_client_disconnect,
        lane,
        retry,
        idempotent,
        timeout,
        drop_unsupported_params,
        continuation,
        balance,
        outlier,
        keys,
        limits: route_limits,
        cache,
        reasoning_budgets,
        guardrails,
        cache_breakpoints,
        resumable,
    } = raw;
    let guardrails = crate::guardrail::references(path, guardrails, defined_guardrails)?;
    if models.is_empty() || models.iter().any(|m| m.is_empty()) {
        return Err(ConfigError::new(
            format!("{path}.models"),
            "needs at least one non-empty model glob, e.g. [\"gpt-4o*\"]",
        ));
    }
    let targets =
        match (upstream, targets) {
            (Some(upstream), None) => vec![target(
                path,
                ups,
                RawTarget {
                    upstream,
                    model: None,
                    weight: None,
                    context_window: None,
                    key_env: None,
                },
                ctx,
            )?],
            (None, Some(ts)) if !ts.is_empty() => ts
                .into_iter()
                .enumerate()
                .map(|(j, t)| target(&format!("{path}.targets[{j}]"), ups, t, ctx))
                .collect::<Result<_, _>>()?,
            (Some(_), Some(_)) => {
                return Err(ConfigError::new(
                    format!("{path}.targets"),
                    "give either `upstream` (one target) or `targets`, not both",
                ))
            }
            (None, _) => return Err(ConfigError::new(
                format!("{path}.upstream"),
                "a route needs `upstream = \"name\"` or `targets = [{ upstream = \"name\" }, ...]`",
            )),
        };
    let fallbacks = fallbacks
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(j, t)| target(&format!("{path}.fallbacks[{j}]"), ups, t, ctx))
        .collect::<Result<Vec<_>, _>>()?;
    let retry = retry_config(&format!("{path}.retry"), retry.unwrap_or_default())?;
    let timeout = match timeout {
        None => None,
        v => Some(duration(&format!("{path}.timeout"), v, Duration::ZERO)?),
    };
    Ok(RouteConfig {
        name: name.unwrap_or_else(|| models[0].clone()),
        models,
        targets,
        fallbacks,
        on_client_disconnect: on_client_disconnect.unwrap_or(OnClientDisconnect::Cancel),
        lane: lane.map(Into::into),
        retry,
        idempotent: idempotent.unwrap_or(false),
        timeout,
        drop_unsupported_params: drop_unsupported_params.unwrap_or(false),
        continuation: continuation.unwrap_or(false),
        cache_breakpoints: cache_breakpoints.unwrap_or(false),
        balance: match balance {
            None | Some(BalanceName::P2cEwma) => sluice_upstream::BalancePolicy::P2cEwma,
            Some(BalanceName::LeastInFlight) => sluice_upstream::BalancePolicy::LeastInFlight,
            Some(BalanceName::WeightedRoundRobin) => {
                sluice_upstream::BalancePolicy::WeightedRoundRobin
            }
            Some(BalanceName::Priority) => sluice_upstream::BalancePolicy::Priority,
        },
        outlier: outlier_config(&format!("{path}.outlier"), outlier.unwrap_or_default())?,
        keys: keys.unwrap_or(default_mode),
        limits: limits::route_limits(&format!("{path}.limits"), route_limits.unwrap_or_default())?,
        cache: cache
            .map(|c| cache_config(&format!("{path}.cache"), c))
            .transpose()?,
        guardrails,
        resumable: resumable
            .map(|r| resumable_config(&format!("{path}.resumable"), r))
            .transpose()?,
        reasoning_budgets: budgets(
            &format!("{path}.reasoning_budgets"),
            reasoning_budgets.unwrap_or_default(),
        )?,
    })
}

/// `resumable = { keep, max_bytes }`.
fn resumable_config(
    path: &str,
    raw: crate::raw::RawResumable,
) -> Result<crate::ResumableConfig, ConfigError> {
    let crate::raw::RawResumable { keep, max_bytes } = raw;
    let d = crate::ResumableConfig::DEFAULT;
    let keep = duration(&format!("{path}.keep"), keep, d.keep)?;
    if keep.is_zero() {
        return Err(ConfigError::new(
            format!("{path}.keep"),
            "must be more than 0 (e.g. \"10m\"); leave `resumable` out to turn it off",
        ));
    }
    let max_bytes = size(&format!("{path}.max_bytes"), max_bytes, d.max_bytes as u64)?;
    if max_bytes < 4096 {
        return Err(ConfigError::new(
            format!("{path}.max_bytes"),
            "must be at least 4KiB (one event must fit), e.g. \"4MiB\"",
        ));
    }
    Ok(crate::ResumableConfig {
        keep,
        max_bytes: usize::try_from(max_bytes).unwrap_or(usize::MAX),
    })
}

/// `cache = { ... }`: the response cache of one route (sluice-state's `CacheConfig`).
fn cache_config(path: &str, raw: RawRouteCache) -> Result<sluice_state::CacheConfig, ConfigError> {
    let RawRouteCache {
        ttl,
        shared,
        max_bytes,
        replay,
        wait,
    } = raw;
    let d = sluice_state::CacheConfig::default();
    let replay = match replay.as_deref() {
        None => d.replay,
        Some(r) => r.parse::<sluice_state::Replay>().map_err(|_| {
            ConfigError::new(
                format!("{path}.replay"),
                format!("`{r}`: expected \"instant\" (every event at once) or \"paced\" (at the original pace)"),
            )
        })?,
    };
    let max_bytes = size(&format!("{path}.max_bytes"), max_bytes, d.max_bytes as u64)?;
    let config = sluice_state::CacheConfig {
        ttl: duration(&format!("{path}.ttl"), ttl, d.ttl)?,
        max_bytes: usize::try_from(max_bytes).unwrap_or(usize::MAX),
        shared: shared.unwrap_or(d.shared),
        replay,
        wait: duration(&format!("{path}.wait"), wait, d.wait)?,
    };
    // The state crate's own bounds (a TTL of at least 1 ms, `max_bytes` up to 256 MiB).
    config.validate().map_err(|e| {
        let field = e.field.strip_prefix("cache.").unwrap_or(e.field);
        ConfigError::new(format!("{path}.{field}"), e.reason)
    })?;
    Ok(config)
}

/// `reasoning_budgets`: the shipped table with the levels given replaced; each at least 1,
/// none below the level under it (a higher effort never thinks less).
fn budgets(
    path: &str,
    raw: RawReasoningBudgets,
) -> Result<sluice_providers::reasoning::BudgetTable, ConfigError> {
    let RawReasoningBudgets {
        minimal,
        low,
        medium,
        high,
        xhigh,
    } = raw;
    let d = sluice_providers::reasoning::BudgetTable::DEFAULT;
    let t = sluice_providers::reasoning::BudgetTable {
        minimal: minimal.unwrap_or(d.minimal),
        low: low.unwrap_or(d.low),
        medium: medium.unwrap_or(d.medium),
        high: high.unwrap_or(d.high),
        xhigh: xhigh.unwrap_or(d.xhigh),
    };
    let levels = [
        ("minimal", t.minimal),
        ("low", t.low),
        ("medium", t.medium),
        ("high", t.high),
        ("xhigh", t.xhigh),
    ];
    for (name, v) in levels {
        if v == 0 {
            return Err(ConfigError::new(
                format!("{path}.{name}"),
                "must be at least 1 (thinking tokens; `reasoning_effort: none` turns thinking off)",
            ));
        }
    }
    for w in levels.windows(2) {
        if w[1].1 < w[0].1 {
            return Err(ConfigError::new(
                format!("{path}.{}", w[1].0),
                format!(
                    "{} is below {} = {}: a higher effort must not get a smaller budget",
                    w[1].1, w[0].0, w[0].1
                ),
            ));
        }
    }
    Ok(t)
}

/// One target of a route: an upstream that exists, a model name, a weight.
fn target(
    path: &str,
    ups: &[UpstreamConfig],
    raw: RawTarget,
    ctx: &mut Ctx<'_>,
) -> Result<TargetConfig, ConfigError> {
    let RawTarget {
        upstream,
        model,
        weight,
        context_window,
        key_env,
    } = raw;
    let idx = ups.iter().position(|u| u.name == upstream).ok_or_else(|| {
        let known: Vec<&str> = ups.iter().map(|u| u.name.as_str()).collect();
        let mut reason = format!(
            "no upstream named `{upstream}` (defined: {})",
            known
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        if let Some(best) = crate::diagnostics::closest(&upstream, &known) {
            reason.push_str(&format!("; did you mean `{best}`?"));
        }
        ConfigError::new(format!("{path}.upstream"), reason)
    })?;
    if model.as_deref() == Some("") {
        return Err(ConfigError::new(
            format!("{path}.model"),
            "must not be empty",
        ));
    }
    if weight == Some(0) {
        return Err(ConfigError::new(
            format!("{path}.weight"),
            "must be at least 1 (remove the target to send it nothing)",
        ));
    }
    let auth = match key_env {
        None => None,
        Some(var) => Some(UpstreamAuth::ApiKey {
            secret: secret(&format!("{path}.key_env"), &var, ctx)?,
        }),
    };
    Ok(TargetConfig {
        upstream: crate::UpstreamId::new(idx),
        model,
        weight: weight.unwrap_or(1),
        context_window,
        auth,
    })
}

fn outlier_config(
    path: &str,
    raw: RawOutlier,
) -> Result<sluice_upstream::OutlierConfig, ConfigError> {
    let RawOutlier {
        consecutive_failures,
        base_ejection_time,
        max_ejection_time,
        max_ejection_percent,
        success_rate,
    } = raw;
    let d = sluice_upstream::OutlierConfig::default();
    if consecutive_failures == Some(0) {
        return Err(ConfigError::new(
            format!("{path}.consecutive_failures"),
            "must be at least 1",
        ));
    }
    let base = duration(
        &format!("{path}.base_ejection_time"),
        base_ejection_time,
        d.base_ejection_time,
    )?;
    let max = duration(
        &format!("{path}.max_ejection_time"),
        max_ejection_time,
        d.max_ejection_time.max(base),
    )?;
    if max < base {
        return Err(ConfigError::new(
            format!("{path}.max_ejection_time"),
            "must be at least base_ejection_time",
        ));
    }
    let pct = max_ejection_percent.unwrap_or(d.max_ejection_percent);
    if pct > 100 {
        return Err(ConfigError::new(
            format!("{path}.max_ejection_percent"),
            "must be 0 to 100",
        ));
    }
    Ok(sluice_upstream::OutlierConfig {
        consecutive_failures: consecutive_failures.or(d.consecutive_failures),
        success_rate: match success_rate {
            Some(false) => None,
            _ => d.success_rate,
        },
        base_ejection_time: base,
        max_ejection_time: max,
        max_ejection_percent: pct,
    })
}

fn retry_config(path: &str, raw: RawRetry) -> Result<crate::RetryConfig, ConfigError> {
    let RawRetry {
        attempts,
        backoff,
        max_backoff,
        max_retry_after,
    } = raw;
    let d = crate::RetryConfig::default();
    let attempts = attempts.unwrap_or(d.attempts);
    if !(1..=10).contains(&attempts) {
        return Err(ConfigError::new(
            format!("{path}.attempts"),
            "must be 1 to 10 (attempts per target tier, the first included)",
        ));
    }
    Ok(crate::RetryConfig {
        attempts,
        backoff: duration(&format!("{path}.backoff"), backoff, d.backoff)?,
        max_backoff: duration(&format!("{path}.max_backoff"), max_backoff, d.max_backoff)?,
        max_retry_after: duration(
            &format!("{path}.max_retry_after"),
            max_retry_after,
            d.max_retry_after,
        )?,
    })
}
