//! [`BoxedMap`]: any bounded map stream behind one allocation, its type free of the map's
//! parts, to keep in a struct field or return from a function.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_lite::Stream;

use super::alongside::{MapStream, sealed};

/// A bounded map stream ([`map_bounded`](super::BoundedStreamExt::map_bounded),
/// [`map_unordered`](super::BoundedStreamExt::map_unordered),
/// [`amap_iter`](super::amap_iter), with any of their scheduling methods) behind one
/// allocation, named by what it yields alone: made by
/// [`boxed_map`](super::BoundedMap::boxed_map).
///
/// A map's own type names its input, its function, the function's future and each part
/// of its scheduler ([`tollgate::map_type`](crate::map_type)); this one names only its
/// lifetime and its outputs, so a keyed crawl fits in a struct field. It keeps everything
/// the map was built with: its limits, its scheduler, a [`MapControl`](super::MapControl)
/// attached to it, positions from [`indexed`](super::BoundedMap::indexed). The cost is
/// the allocation when it is made and one call through a pointer per output.
///
/// It is `Send`, as is every map whose input, function and futures are. For a map that is
/// not (its futures hold an `Rc`, say), keep `Pin<Box<dyn Stream<Item = T> + 'a>>`
/// instead (`futures_lite::StreamExt::boxed_local`). A collecting map (`map_async`) is a
/// future: keep it as `Pin<Box<dyn Future<Output = Vec<T>> + Send + 'a>>`.
///
/// # Examples
///
/// ```
/// use futures_lite::StreamExt;
/// use tollgate::futures::BoxedMap;
/// use tollgate::{MapControl, Rate, amap_iter};
///
/// /// A crawl kept between calls: its type names neither the closures nor the scheduler.
/// struct Crawl {
///     pages: BoxedMap<'static, (usize, Result<String, u16>)>,
///     control: MapControl<String>,
/// }
///
/// impl Crawl {
///     fn new(urls: Vec<String>) -> Self {
///         let control = MapControl::new();
///         let host = |url: &String| url.split('/').nth(2).unwrap_or_default().to_owned();
///         let pages = amap_iter(urls, 8, |url| async move { Ok::<_, u16>(url) })
///             .per_key(host, 2)
///             .per_key_rate(Rate::per_second(1_000))
///             .indexed()
///             .control(&control)
///             .boxed_map();
///         Self { pages, control }
///     }
/// }
///
/// # futures_lite::future::block_on(async {
/// let urls = (0..20).map(|i| format!("https://host{}.example/{i}", i % 3)).collect();
/// let mut crawl = Crawl::new(urls);
/// let mut seen = 0;
/// while let Some((_position, page)) = crawl.pages.next().await {
///     assert!(page.is_ok());
///     seen += 1;
/// }
/// assert_eq!(seen, 20);
/// assert_eq!(crawl.control.progress().finished(), 20);
/// # });
/// ```
#[must_use = "streams do nothing unless polled"]
pub struct BoxedMap<'a, T> {
    map: Pin<Box<dyn ErasedMap<T> + Send + 'a>>,
}

/// A map stream with its name for `Debug`: what [`BoxedMap`] keeps behind its pointer.
trait ErasedMap<T>: MapStream<Item = T> + fmt::Debug {}

impl<M: MapStream + fmt::Debug> ErasedMap<M::Item> for M {}

impl<'a, T> BoxedMap<'a, T> {
    /// `map`, boxed.
    pub(crate) fn new(map: impl MapStream<Item = T> + fmt::Debug + Send + 'a) -> Self {
        Self { map: Box::pin(map) }
    }
}

impl<T> Stream for BoxedMap<'_, T> {
    type Item = T;

    #[inline]
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        self.map.as_mut().poll_next(cx)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.map.size_hint()
    }
}

impl<T> sealed::Sealed for BoxedMap<'_, T> {}

impl<T> MapStream for BoxedMap<'_, T> {
    #[inline]
    fn poll_work(mut self: Pin<&mut Self>, cx: &mut Context<'_>) {
        self.map.as_mut().poll_work(cx);
    }

    fn poll_park(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> bool {
        self.map.as_mut().poll_park(cx)
    }

    #[inline]
    fn work_done(mut self: Pin<&mut Self>) {
        self.map.as_mut().work_done();
    }
}

impl<T> fmt::Debug for BoxedMap<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.map.fmt(f)
    }
}
